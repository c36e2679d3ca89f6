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
# # Recipe sweep: cost, harm, divergence and decision margins
#
# Reads one sweep directory written by `guardrepro sweep SPEC --out DIR`
# (environment variable `GUARDREPRO_SWEEP_DIR`) and redraws its figures with
# guardrepro's own functions: the cost-harm frontier with its bootstrap
# whiskers, the teacher-forced KL per recipe, and each row's decision margin
# against whether the recipe flipped the reference's strict decision.
# Figures go to `GUARDREPRO_FIGURES_DIR` (default: `figures/` inside the sweep
# directory); nothing else is written there.

# %%
import json
import os
from pathlib import Path

from IPython.display import Image, display

from guardrepro.experiments.frontier import FrontierReport, format_frontier
from guardrepro.experiments.outputs import (
    SummaryRow,
    flips,
    frontier_figure,
    kl_figure,
    summary_table,
)

# parameters: the sweep directory (required: the demo runs no sweep) and where figures
# go (default: a `figures` folder inside the sweep directory)
if not os.environ.get("GUARDREPRO_SWEEP_DIR"):
    raise SystemExit("set GUARDREPRO_SWEEP_DIR to a `guardrepro sweep` directory")
SWEEP_DIR = Path(os.environ["GUARDREPRO_SWEEP_DIR"])
FIG_DIR = Path(os.environ.get("GUARDREPRO_FIGURES_DIR") or SWEEP_DIR / "figures")
FIG_DIR.mkdir(parents=True, exist_ok=True)
frontier = FrontierReport.from_dict(
    json.loads((SWEEP_DIR / "frontier.json").read_text(encoding="utf-8")))
summary = [SummaryRow.from_dict(row) for row in
           json.loads((SWEEP_DIR / "summary.json").read_text(encoding="utf-8"))]
sweep = frontier.extra["sweep"]
print(f"sweep {sweep['name']} on {sweep['device']}: "
      f"{len(summary)} configurations")

# %% [markdown]
# ## Summary: agreement with the reference, divergence, errors, cost

# %%
print(summary_table(summary))

# %% [markdown]
# ## The frontier (dominated configurations named)

# %%
print(format_frontier(frontier))
display(Image(filename=str(frontier_figure(frontier, FIG_DIR / "frontier.png"))))

# %% [markdown]
# ## Teacher-forced KL per recipe

# %%
display(Image(filename=str(kl_figure(summary, FIG_DIR / "kl.png"))))

# %% [markdown]
# ## Decision margin against flips
#
# For each recipe, the candidate's top1-top2 logit gap at the decision token
# (teacher forced on the reference's tokens) and whether the recipe's own
# greedy run flipped the reference's strict decision. Flips should sit at
# small margins; a flip at a large margin means the copy changed its mind.

# %%
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(7, 3.5))
names = []
for row in summary:
    div_file = SWEEP_DIR / "runs" / row.name / "divergence.json"
    if not div_file.exists():
        continue
    flipped = flips(SWEEP_DIR / "reference", div_file.parent)
    scored = [r for r in json.loads(div_file.read_text())["rows"]
              if r["decision_margin"] is not None]
    moved = [r["decision_margin"] for r in scored if flipped.get(r["row_id"])]
    kept = [r["decision_margin"] for r in scored if not flipped.get(r["row_id"])]
    y = len(names)
    ax.scatter(kept, [y] * len(kept), s=10, color="tab:blue", alpha=0.6)
    ax.scatter(moved, [y] * len(moved), s=18, color="tab:red")
    names.append(row.name)
    low = f"{min(kept):.2f}" if kept else "-"
    print(f"{row.name:<14} flips {len(moved):>2}/{len(scored)}  "
          f"margins of flipped rows {sorted(round(m, 2) for m in moved)}  "
          f"smallest unflipped margin {low}")
ax.set_yticks(range(len(names)), names)
ax.set_xlabel("decision-token margin (teacher forced); red = strict flip")
fig.savefig(FIG_DIR / "margins.png", dpi=110, bbox_inches="tight")
plt.show()
