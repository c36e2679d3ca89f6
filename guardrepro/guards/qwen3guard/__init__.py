"""Qwen3Guard-Gen (0.6B / 4B / 8B): the evaluator rules and the project's chat template
(``rules``)."""
