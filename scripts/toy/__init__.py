"""The embedded default: a toy TS-Bench generator and a toy Qwen2 guard."""
