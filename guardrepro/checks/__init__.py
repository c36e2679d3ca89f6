"""Checks on records: metrics, cluster bootstrap, flip statistics, the parity
gate and benchmark audits.

Modules:

- ``metrics``: strict confusion (fail-closed) and the metrics derived from it,
  every figure with its numerator and denominator.
- ``bootstrap``: the one interval engine, a seeded cluster bootstrap of a
  ratio of sums (optionally stratified; batches of 512; nanquantile bounds).
- ``pairs``: original/edit pairs per base, strict fail-closed decisions.
- ``stats``: strict accuracy per variant and the paired statistics per edit
  and view with their intervals (``stats.json``); ``stats_extras`` holds the
  labelled extras (exact-score transitions, placebo correction).
- ``predictions``: predictions JSONL files, the input when there is no run
  directory.
- ``gate``: the parity gate of a run against reference predictions
  (``gate.json``, exit code 0 / 3 / 2); ``gate_spec`` reads its specs;
  ``parity`` gates a run or predictions file on a cohort or a whole split and
  adds the agreement figures with their intervals.
- ``published``: a run's figures beside published ones
  (``checks/published/*.toml``); ``sides`` says what the two sides of a
  comparison are (guard, checkpoint, cohort), for ``compare`` and
  ``vs-published``.
- ``toolsafe_table``: ToolSafe's table for one split from runs, predictions
  files or released logs; ``toolsafe_metrics``: its accuracy, F1 and recall
  in both views (upstream and fail-closed) with intervals.
- ``audit``: audits of the benchmark itself (equal-interaction weighting, the
  tool-name lookup diagnostic); no model involved.
- ``association``: rung 2 of the audit ladder, the guard's observational
  association with nuisance features; ``ladder`` holds what each rung may
  and may not be taken to show.
- ``runio``: reading a run directory (records, manifest, expected rows) and
  writing JSON atomically.
- ``gate_types``, ``stats_types``, ``audit_types``: the typed results of the
  gate, the statistics and the audits (frozen dataclasses; ``to_dict()`` is
  the JSON object each verb writes, ``to_json()`` its text, ``from_dict()``
  reads gate.json and stats.json back); ``figure`` holds the one figure type
  (count, denominator, point, optional interval) and ``serde`` derives the
  JSON of every result type from its fields.
- ``tables``: pandas on demand, a nested result as one row per figure, and
  CSV/Parquet export (the result types' ``to_frame()``); ``frames`` is the
  pandas API on top of every check (``import guardrepro as gr``).
- ``compare``: two runs row by row (e.g. BF16 vs Q8), agreement and the
  disagreeing rows.
- ``attribute``: every disagreement with a reference attributed to one cause
  (sampling, quantization, backend, unexplained); ``loaders`` reads its
  references and runs (also for the Python API).
- ``frontier``: cost and harm of guard configurations, dominance and the
  Pareto frontier.
- ``report``: ``report.md`` and its PNG figures, which ``report_figures``
  draws (with the data behind each one); ``html_report``: the self-contained HTML report;
  ``guard_table``: several guards' runs of one cohort side by side;
  ``guard_splits``: several guards on every split with the paper's rows
  beside; ``figures``: the matplotlib and PNG plumbing they
  share; ``formatting``: how counts, rates and numbers are written in every
  readable table.
"""
