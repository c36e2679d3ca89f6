"""A run against a reference: the parity gate, per-row agreement, row-by-row comparison,
attribution of disagreements, published figures and ToolSafe's table. Imports the stages
below it.

Modules:

- ``attribute``: every disagreement with a reference attributed to one cause (sampling,
  quantization, backend, unexplained).
- ``compare``: two runs row by row (e.g. BF16 vs Q8), agreement and the disagreeing rows.
- ``gate``: the parity gate of a run against reference predictions (``gate.json``, exit code
  0 / 3 / 2).
- ``gate_spec``: gate specs (``checks/*.toml``), read strictly.
- ``gate_types``: the gate's typed result (``GateResult`` and its parts).
- ``loaders``: the references and runs of the attribution (also for the Python API).
- ``published``: a run's figures beside published ones (``checks/published/*.toml``).
- ``rows``: per-row parity on a cohort or a whole split: the gate with its ``agreement``
  section (``gate_run``).
- ``sides``: what the two sides of a comparison are (guard, checkpoint, cohort).
- ``toolsafe_table``: ToolSafe's table for one split: sources, per-row predictions, both
  views, the paper's figures beside.
"""
