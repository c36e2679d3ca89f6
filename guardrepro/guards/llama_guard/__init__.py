"""Llama Guard 3 (1B / 8B): the evaluator rules and the project's chat template (``rules``)."""
