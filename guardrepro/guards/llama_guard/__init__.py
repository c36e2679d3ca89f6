"""Llama Guard 3 (1B / 8B): conversation-with-categories prompt, safe/unsafe parser."""

from guardrepro.guards.llama_guard.adapter import CATEGORIES, LlamaGuard3Adapter, parse_llama_guard

__all__ = ["CATEGORIES", "LlamaGuard3Adapter", "parse_llama_guard"]
