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
# # Decision flips under counterfactual edits
#
# Reads one run directory (`GUARDREPRO_RUN_DIR`, default: the last `guardrepro
# demo`'s transformers run) through the Python API (`import guardrepro as gr`)
# and reproduces the report's flip figures, each from a DataFrame of the data it
# draws (`flip_data`, `domain_data`, `margin_data`). The run's `stats.json` is
# used when present; otherwise the statistics are computed here in memory
# (`GUARDREPRO_REPLICATES`, default 10,000; seed 260828), not written. Figures go
# to `GUARDREPRO_FIGURES_DIR` (default: `figures/` inside the run directory).

# %%
import os
from pathlib import Path

import pandas as pd
from IPython.display import Image, display

import guardrepro as gr
from guardrepro.checks.report.markdown import (
    domain_bars,
    flip_bars,
    margin_groups,
    plot_flip_rates,
    plot_margin_histogram,
)
from guardrepro.rundir.read import load_run

# parameters: the run (default: the last `guardrepro demo`) and where figures go
# (default: a `figures` folder inside the run directory)
RUN_DIR = Path(os.environ.get("GUARDREPRO_RUN_DIR") or gr.last_demo_run())
FIG_DIR = Path(os.environ.get("GUARDREPRO_FIGURES_DIR") or RUN_DIR / "figures")
FIG_DIR.mkdir(parents=True, exist_ok=True)
REPLICATES = int(os.environ.get("GUARDREPRO_REPLICATES", "10000"))
runs = gr.load_run(RUN_DIR)
print(f"{len(runs)} expected rows ({runs.attrs['expected_source']}), "
      f"{runs.attrs['records']} records")
print(runs.groupby("variant", observed=True)["status"].value_counts().unstack(fill_value=0))

# %%
if (RUN_DIR / "stats.json").is_file():
    stats = gr.stats(RUN_DIR)
    print("loaded stats.json")
else:
    stats = gr.stats(runs, replicates=REPLICATES)
    print(f"computed in memory with {REPLICATES} replicates")
figures = stats.to_frame()
flip_figures = figures[figures["path"].str.match(r"edits\.[^.]+\.[^.]+\.flip_rate$")]
print(flip_figures[["path", "count", "denominator", "point", "lower", "upper"]]
      .to_string(index=False))

# %% [markdown]
# ## Flip rates by edit (95% cluster bootstrap; all pairs unstratified, valid both
# stratified by domain:gold) and by domain

# %%
flip_data = pd.DataFrame(flip_bars(stats))  # the left panel: edit x view
domain_data = pd.DataFrame(domain_bars(stats))  # the right panel: edit x domain, all pairs
print(flip_data.to_string(index=False))
for edit, block in stats.edits.items():
    flip = block.views["all_pairs"].flip_rate
    print(f"{edit:<20} all pairs {flip.count}/{flip.denominator} "
          f"[{flip.lower}, {flip.upper}] over {flip.clusters} bases")
display(Image(filename=str(plot_flip_rates(stats, FIG_DIR / "flip_rates.png"))))

# %% [markdown]
# ## Paired decisions: one row per base sample, one column per variant
#
# Strict decisions are fail-closed (an invalid or missing row counts as unsafe).
# A flip is an edited variant whose decision differs from the original's.

# %%
decisions = runs.pivot(index="base_sample_id", columns="variant", values="strict_decision")
edits = [v for v in decisions.columns if v != "original"]
flips = decisions[edits].ne(decisions["original"], axis=0)
directions = {
    e: {"flips": int(flips[e].sum()), "pairs": len(flips),
        "safe_to_unsafe": int(((decisions["original"] == 0) & (decisions[e] == 1)).sum()),
        "unsafe_to_safe": int(((decisions["original"] == 1) & (decisions[e] == 0)).sum())}
    for e in edits}
for e, d in directions.items():
    print(f"{e:<20} flips {d['flips']}/{d['pairs']}  safe->unsafe {d['safe_to_unsafe']}  "
          f"unsafe->safe {d['unsafe_to_safe']}")

# %% [markdown]
# ## Decision margins (split by agreement with the reference when gate.json exists)

# %%
gate = gr.load_gate(RUN_DIR)
rows = load_run(RUN_DIR).rows  # the histogram takes the checks' row results
split, groups, no_margin = margin_groups(rows, gate)
margin_data = pd.DataFrame([{"group": g, "margin": m} for g, ms in groups.items() for m in ms],
                           columns=["group", "margin"])
print(f"{split}; {no_margin} row(s) without a margin")
print(margin_data.groupby("group")["margin"].describe())
display(Image(filename=str(plot_margin_histogram(rows, gate, FIG_DIR / "margin_hist.png"))))
