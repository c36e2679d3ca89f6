"""guardrepro: reproduce safety guard outputs, gate parity, measure counterfactual flips.

The Python API (``import guardrepro as gr``) is loaded lazily from
``guardrepro.api`` so that importing the package stays light:

- ``gr.load_run(path, cohort=None)``: DataFrame, one row per expected cohort row.
- ``gr.read_run(path, cohort=None)`` -> ``RunData``: the run read once, which
  ``load_run``, ``stats``, ``gate`` and ``compare`` take in place of a path.
- ``gr.load_cohort(path)``: DataFrame, one row per cohort line.
- ``gr.stats(run_or_df)`` -> ``StatsResult``; ``gr.gate(run, spec)`` -> ``GateResult``
  (``.passed``, ``.verdict``, ``.to_dict()``, ``.to_frame()``); ``gr.load_gate(run)``
  reads the gate.json that ``guardrepro gate`` wrote.
- ``gr.compare(a, b)``: DataFrame, one row per row in both runs.
- ``gr.attribute(reference, bf16=..., quantized=[...], sampled=[...])``: DataFrame,
  one row per disagreement with its cause.
- ``gr.export(df, path)``: any of these DataFrames as CSV or Parquet (by suffix).
- ``gr.last_demo_run()``: the transformers run of the last finished ``guardrepro demo``.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

API = ("load_run", "load_cohort", "stats", "gate", "load_gate", "compare", "attribute",
       "export", "StatsResult", "GateResult", "read_run", "RunData")
__all__ = ["__version__", *API, "last_demo_run"]


def __getattr__(name: str) -> Any:
    if name == "last_demo_run":  # the notebooks' default run: the last `guardrepro demo`
        from guardrepro.demo import last_demo_run

        return last_demo_run
    if name in API:
        from guardrepro import api

        return getattr(api, name)
    raise AttributeError(f"module 'guardrepro' has no attribute {name!r}")
