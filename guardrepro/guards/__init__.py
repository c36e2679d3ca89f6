"""Guard adapters, one subpackage per guard (ts_guard, llama_guard, qwen3guard,
shieldgemma, rule), each with its prompt or message builder, parser or scorer,
expected special tokens and decoding defaults; ``registry`` is the table of
them (``guardrepro guards`` lists it)."""
