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
# Reads one run directory (environment variable `GUARDREPRO_RUN_DIR`) and
# reproduces the report's flip figures with guardrepro's own functions. The
# run's `stats.json` is used when present; otherwise the statistics are
# computed here in memory (`GUARDREPRO_REPLICATES`, default 10,000; seed
# 260828) and nothing is written to the run directory. Figures go to
# `GUARDREPRO_FIGURES_DIR` (default: a temporary directory).

# %%
import json
import os
import tempfile
from pathlib import Path

from IPython.display import Image, display

from guardrepro.checks.runio import load_run
from guardrepro.checks.stats import SCHEMA as STATS_SCHEMA
from guardrepro.checks.stats import compute_stats, format_table
from guardrepro.report import load_gate, plot_flip_rates, plot_margin_histogram

RUN_DIR = Path(os.environ["GUARDREPRO_RUN_DIR"])
FIG_DIR = Path(os.environ.get("GUARDREPRO_FIGURES_DIR") or tempfile.mkdtemp(prefix="figs-"))
REPLICATES = int(os.environ.get("GUARDREPRO_REPLICATES", "10000"))
run = load_run(RUN_DIR)
print(f"{len(run.rows)} expected rows ({run.expected_source}), {run.records} records")

# %%
stats_path = RUN_DIR / "stats.json"
stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.is_file() else None
if stats is not None and stats.get("schema") == STATS_SCHEMA:
    print(f"loaded {stats_path}")
else:  # none yet, or written by an older guardrepro
    stats = compute_stats(run.rows, replicates=REPLICATES,
                          expected_source=run.expected_source).to_json()
    print(f"computed in memory with {REPLICATES} replicates")
print(format_table(stats))

# %% [markdown]
# ## Flip rates by edit (95% cluster bootstrap; all pairs unstratified, valid both
# stratified by domain:gold) and by domain

# %%
display(Image(filename=str(plot_flip_rates(stats, FIG_DIR / "flip_rates.png"))))

# %% [markdown]
# ## Directions: the guard's original decision is the denominator

# %%
for edit, block in stats["edits"].items():
    s2u, u2s = block["all_pairs"]["safe_to_unsafe"], block["all_pairs"]["unsafe_to_safe"]
    print(f"{edit:<20} safe->unsafe {s2u['count']}/{s2u['denominator']} "
          f"[{s2u['lower']}, {s2u['upper']}]  "
          f"unsafe->safe {u2s['count']}/{u2s['denominator']} [{u2s['lower']}, {u2s['upper']}]")

# %% [markdown]
# ## Decision margins (split by agreement with the reference when gate.json exists)

# %%
gate = load_gate(RUN_DIR)
display(Image(filename=str(plot_margin_histogram(run.rows, gate, FIG_DIR / "margin_hist.png"))))
