"""Qwen3Guard-Gen (0.6B / 4B / 8B): Safety/Categories output, Controversial = 0.5."""

from guardrepro.guards.qwen3guard.adapter import CATEGORIES, Qwen3GuardAdapter, parse_qwen3guard

__all__ = ["CATEGORIES", "Qwen3GuardAdapter", "parse_qwen3guard"]
