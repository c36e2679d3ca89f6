"""Checks on records, one package per stage; a lower stage never imports a higher one.

Stages, lowest first (docs/ARCHITECTURE.md, "Stages inside checks/"; the order is enforced
by tests/test_checks_stages.py):

- ``core``: The values and rules every check shares: strict metrics, the interval engine,
  how figures are written, tables of results. Imports no other stage.
- ``io``: Reading the checks' other inputs: predictions files and the comparison keys of
  figures (a run directory is read by ``guardrepro.rundir``). Imports only ``core``.
- ``stats``: Statistics of one run: original/edit pairs, per-variant accuracy and the paired
  flip statistics (``stats.json``) with their typed result, and ToolSafe's whole-split
  metrics. Imports ``core`` and ``io``.
- ``parity``: A run against a reference: the parity gate, per-row agreement, row-by-row
  comparison, attribution of disagreements, published figures and ToolSafe's table. Imports
  the stages below it.
- ``audits``: Audits of the benchmark itself and the audit ladder. Imports the stages below
  it (in practice ``core`` only).
- ``report``: What a reader sees: ``report.md``, the HTML report, the guard tables and their
  figures. The top stage: nothing else in ``checks`` imports it.

The pandas face over these checks is ``guardrepro.api`` (``import guardrepro as gr``), and the
cost-harm frontier is ``guardrepro.experiments.frontier``.
"""
