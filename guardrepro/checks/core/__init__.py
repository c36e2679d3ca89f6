"""The values and rules every check shares: strict metrics, the interval engine, how figures
are written, tables of results. Imports no other stage.

Modules:

- ``bootstrap``: the one interval engine, a seeded cluster bootstrap of a ratio of sums, and
  the bootstrap defaults.
- ``figure``: the one figure type: a count over a denominator, its point and an optional
  interval.
- ``formatting``: how counts, rates and numbers are written in every readable table.
- ``metrics``: strict confusion (fail-closed) and the metrics derived from it, every figure
  with its numerator and denominator.
- ``ranking``: a scored classifier's AUROC, AUPRC, ECE, ROC/PR curves and reliability bins,
  per bootstrap weight vector.
- ``serde``: the figure shapes in ``guardrepro.serde``'s JSON derived from dataclass fields.
- ``tables``: pandas on demand, a nested result as one row per figure, CSV/Parquet export
  (the result types' ``to_frame()``).
"""
