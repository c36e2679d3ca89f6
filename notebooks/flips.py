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
# Reads one run directory (environment variable `GUARDREPRO_RUN_DIR`) through
# the Python API (`import guardrepro as gr`) and reproduces the report's flip
# figures. The run's `stats.json` is used when present; otherwise the
# statistics are computed here in memory (`GUARDREPRO_REPLICATES`, default
# 10,000; seed 260828) and nothing is written to the run directory. Figures go
# to `GUARDREPRO_FIGURES_DIR` (default: a temporary directory).

# %%
import os
import tempfile
from pathlib import Path

from IPython.display import Image, display

import guardrepro as gr
from guardrepro.checks.report import plot_flip_rates, plot_margin_histogram

RUN_DIR = Path(os.environ["GUARDREPRO_RUN_DIR"])
FIG_DIR = Path(os.environ.get("GUARDREPRO_FIGURES_DIR") or tempfile.mkdtemp(prefix="figs-"))
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
display(Image(filename=str(plot_flip_rates(stats.to_json(), FIG_DIR / "flip_rates.png"))))

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
from guardrepro.checks.runio import load_run  # noqa: E402  (the histogram takes row results)

gate = gr.load_gate(RUN_DIR)
display(Image(filename=str(plot_margin_histogram(
    load_run(RUN_DIR).rows, None if gate is None else gate.to_json(),
    FIG_DIR / "margin_hist.png"))))
