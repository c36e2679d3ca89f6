"""Reading the checks' inputs: run directories and predictions files. Imports only ``core``.

Modules:

- ``predictions``: predictions JSONL files, the input when there is no run directory.
- ``runio``: reading a run directory (records, manifest, expected rows) and writing JSON
  atomically.
"""
