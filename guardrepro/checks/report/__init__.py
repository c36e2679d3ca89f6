"""What a reader sees: ``report.md``, the HTML report, the guard tables and their figures. The
top stage: nothing else in ``checks`` imports it.

Modules:

- ``charts``: the report's PNG figures, the data each one draws, and their captions.
- ``figures``: the matplotlib (Agg) and PNG plumbing of the report, the guard tables and the
  sweep outputs.
- ``guard_splits``: several guards on every split, with the paper's rows beside.
- ``guard_table``: several guards' runs of one cohort side by side.
- ``hints``: the commands a report suggests, each runnable as printed.
- ``html``: the self-contained HTML report.
- ``markdown``: ``report.md`` and its PNG figures.
- ``score_figures``: the scored-classifier figures (ROC/PR, reliability, threshold frontier)
  and the p_unsafe drift scatter, with their report section.
"""
