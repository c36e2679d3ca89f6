"""Rule guards: model-free baselines scored like any guard (``rules``: the rules, their
inputs and output; ``lookup``: the fitted tool-lookup table)."""
