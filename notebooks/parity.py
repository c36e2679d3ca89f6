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
# Reads `gate.json` of the run in `GUARDREPRO_RUN_DIR` (written by
# `guardrepro gate RUN_DIR --spec checks/...toml`) and shows its figures, the
# reference-vs-local score confusion and the disagreeing rows. Figures go to
# `GUARDREPRO_FIGURES_DIR` (default: a temporary directory).

# %%
import os
import tempfile
from pathlib import Path

from IPython.display import Image, display

from guardrepro.checks.gate import format_table
from guardrepro.report import load_gate, plot_score_confusion

RUN_DIR = Path(os.environ["GUARDREPRO_RUN_DIR"])
FIG_DIR = Path(os.environ.get("GUARDREPRO_FIGURES_DIR") or tempfile.mkdtemp(prefix="figs-"))
gate = load_gate(RUN_DIR)
if gate is None:
    print("no gate.json in this run: run `guardrepro gate` first")
else:
    print(gate["verdict"])
    print(format_table(gate))

# %% [markdown]
# ## Reference score (rows) by local score (columns)

# %%
if gate is not None:
    display(Image(filename=str(plot_score_confusion(gate, FIG_DIR / "score_confusion.png"))))

# %% [markdown]
# ## Rows whose strict decision disagrees (or that are missing)

# %%
if gate is not None:
    for d in gate["disagreements"]:
        print(f"{d['row_id']}  {d['domain']}  gold {d['gold_label']}  reference "
              f"{d['reference_score']}  local {d['local_score']} ({d['local_status']}, "
              f"{d['reason']})")
    print(f"{len(gate['disagreements'])} disagreeing row(s)")
