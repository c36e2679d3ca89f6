"""Checks on records: metrics, cluster bootstrap, flip statistics, the parity
gate and benchmark audits.

Modules:

- ``metrics``: strict confusion (fail-closed) and the metrics derived from it,
  every figure with its numerator and denominator.
- ``bootstrap``: the seeded, optionally stratified percentile cluster bootstrap
  of a ratio of sums.
- ``stats``: per-variant metrics and paired original-vs-edit flip statistics
  of one run (``stats.json``).
- ``gate``: the parity gate of a run against reference predictions
  (``gate.json``, exit code 0 / 3 / 2).
- ``audit``: audits of the benchmark itself (equal-interaction weighting, the
  tool-name lookup diagnostic); no model involved.
- ``association``: rung 2 of the audit ladder, the guard's observational
  association with nuisance features, and the ladder's statements.
- ``runio``: reading a run directory (records, manifest, expected rows) and
  writing JSON atomically.
"""
