"""Reading the checks' inputs: run directories and predictions files. Imports only ``core``.

Modules:

- ``keys``: the comparison key each figure of ``table``, ``guard-table`` and ``frontier``
  was measured under, and the line saying which parts rows share.
- ``predictions``: predictions JSONL files, the input when there is no run directory.
- ``runio``: reading a run directory (records, manifest, expected rows) and writing JSON
  atomically.
- ``stream``: a run directory read a line at a time for its rows only (``stats`` at any
  size).
"""
