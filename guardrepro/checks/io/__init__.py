"""Reading the checks' other inputs: predictions files and the comparison keys of figures.
Imports only ``core`` (a run directory is read by ``guardrepro.rundir``).

Modules:

- ``keys``: the comparison key each figure of ``table``, ``guard-table`` and ``frontier``
  was measured under, and the line saying which parts rows share.
- ``predictions``: predictions JSONL files, the input when there is no run directory.
"""
