"""Statistics of one run: original/edit pairs, per-variant accuracy and the paired flip
statistics (``stats.json``) with their typed result, and ToolSafe's whole-split metrics.
Imports ``core`` and ``io``.

Modules:

- ``cache``: when a run's stats.json may be reused instead of recomputed.
- ``compute``: strict accuracy per variant and the paired statistics per edit and view with
  their intervals (``stats.json``).
- ``definitions``: each paired statistic declared once (definition, stratification, docs
  line).
- ``drift``: per-row |delta p_unsafe| between two runs (mean, p95, max with intervals,
  threshold crossings, moved but held).
- ``extras``: the labelled extras beside the published statistics (exact-score transitions,
  placebo correction).
- ``pairs``: original/edit pairs per base, strict fail-closed decisions.
- ``scores``: the guard as a scored classifier (p_unsafe): AUROC, AUPRC, the threshold
  figures and calibration, in both views.
- ``thresholds``: the threshold frontier on p_unsafe (missed vs false flags, harm, the
  harm-minimising threshold with its interval).
- ``toolsafe_metrics``: ToolSafe's guard metrics on a whole split, in its two views.
- ``types``: the typed results (frozen dataclasses; ``to_json()`` is the JSON the verb
  writes, ``from_json()`` reads it back where it is read back).
"""
