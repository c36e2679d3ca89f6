"""Benchmark stage: reading TS-Bench steps (see ``docs/PROTOCOL.md``)."""
