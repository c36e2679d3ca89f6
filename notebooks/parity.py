# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Parity with the reference predictions
#
# Reads the gate of the run in `GUARDREPRO_RUN_DIR` (its `gate.json`, written
# by `guardrepro gate RUN_DIR --spec checks/...toml`) through the Python API
# and shows the reference-vs-local score confusion (the figure's data as the
# DataFrame `confusion`) and the disagreeing rows.
# Figures go to `GUARDREPRO_FIGURES_DIR` (default: `figures/` inside the run directory).

# %%
import os
from pathlib import Path

import pandas as pd
from IPython.display import Image, display

import guardrepro as gr
from guardrepro.checks.report.markdown import plot_score_confusion

# parameters: the run (default: the last `guardrepro demo`) and where figures go
# (default: a `figures` folder inside the run directory)
RUN_DIR = Path(os.environ.get("GUARDREPRO_RUN_DIR") or gr.last_demo_run())
FIG_DIR = Path(os.environ.get("GUARDREPRO_FIGURES_DIR") or RUN_DIR / "figures")
FIG_DIR.mkdir(parents=True, exist_ok=True)
gate = gr.load_gate(RUN_DIR)
if gate is None:
    print("no gate.json in this run: run `guardrepro gate` first")
else:
    print(gate.verdict)
    gated = gate.to_frame()
    print(f"{len(gated)} gated rows, strict agreement {int(gated['strict_agree'].sum())}"
          f"/{len(gated)}")

# %% [markdown]
# ## Reference score (rows) by local score (columns)

# %%
if gate is not None:
    confusion = pd.DataFrame([list(r) for r in gate.confusion.matrix],
                             index=pd.Index(gate.confusion.row_labels, name=gate.confusion.rows),
                             columns=list(gate.confusion.column_labels))
    print(confusion)
    failed = [c.name for c in gate.checks if not c.passed]
    print(f"strict agreement {gate.figures.strict_agreement.count}/"
          f"{gate.figures.strict_agreement.denominator}; failed checks: {failed or 'none'}")
    display(Image(filename=str(plot_score_confusion(gate, FIG_DIR / "score_confusion.png"))))

# %% [markdown]
# ## Rows whose strict decision disagrees (or that are missing), with their margins

# %%
if gate is not None:
    disagreements = gate.disagreements()
    print(disagreements[["row_id", "domain", "gold_label", "reference_score", "local_score",
                         "local_status", "decision_margin"]].to_string(index=False))
    print(f"{len(disagreements)} disagreeing row(s)")
