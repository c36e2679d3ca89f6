"""Guard adapters: template + parser + decoding defaults for one guard model."""
