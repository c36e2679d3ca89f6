"""A sweep's rule baselines, run through ``guardrepro run`` like any guard.

Input: a sweep's ``[[rule]]`` entry (``experiments.spec.RuleEntry``), the
cohort JSONL the sweep runs, and, for the lookup rule, the cohort spec whose
data lock holds the benchmark the lookup is fitted on.
Output: a rule run profile (``rules/<name>.toml`` under the sweep's output:
backend ``rule``, guard ``rule-nuisance`` or ``rule-tool-lookup``) and, for the
lookup, its fitted table beside it (``rules/<name>.lookup.json``,
``guards.rule.lookup``); then the run directory ``pipeline.run_cohort``
writes with that profile, exactly what ``guardrepro run --profile
rules/<name>.toml`` writes.

Invariants: the records come from the normal run path (the rule backend,
``run.runners.rule_runner``), so they are the same as any rule run's, and a
killed sweep resumes the run like any other. The lookup is fitted only on its
declared split (``guards.rule.lookup.training_rows``); the table's sha256 is in
the run's provenance (``rule_runner.describe``), so a rerun with another split
is refused like any provenance change. Both files are written atomically and
are the same bytes on every rerun with the same inputs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.guards.rule.lookup import fit_table, save_table, training_rows

# the sweep's rule name -> the rule guard that runs it
GUARDS: Mapping[str, str] = {"nuisance": "rule-nuisance", "lookup": "rule-tool-lookup"}
RULES = tuple(GUARDS)


def fit_lookup_table(cohort_spec: Path, cohort_rows: Sequence[Any], train_split: str,
                     home: str | Path | None) -> dict[str, Any]:
    """The lookup table fitted on the declared split of the cohort spec's benchmark."""
    from guardrepro.artifacts.fetch import materialize
    from guardrepro.bench.cohort.spec import load_spec
    from guardrepro.bench.tsbench import load_benchmark

    spec = load_spec(cohort_spec)
    bench = load_benchmark(materialize(spec.data_lock, home), spec.benchmark)
    return fit_table(training_rows(bench, {r.base_sample_id for r in cohort_rows}, train_split))


def profile_text(name: str, rule: str, lookup_file: str | None) -> str:
    """The rule run profile (TOML) for sweep rule ``rule``."""
    lines = [f"# sweep rule baseline {name!r}: no model", f"name = {json.dumps(name)}",
             'backend = "rule"', "", "[guard]", f"name = {json.dumps(GUARDS[rule])}", ""]
    if lookup_file is not None:
        lines += ["[backend_options]", f"lookup_table = {json.dumps(lookup_file)}", ""]
    lines += ["[decoding]", 'mode = "greedy"', "max_new_tokens = 1", ""]
    return "\n".join(lines)


def write_rule_profile(name: str, rule: str, folder: Path,
                       lookup: Mapping[str, Any] | None = None) -> Path:
    """Write ``folder/<name>.toml`` (and the lookup table beside it); returns the profile."""
    folder.mkdir(parents=True, exist_ok=True)
    lookup_file = None
    if rule == "lookup":
        if lookup is None:
            raise ValueError("the lookup rule needs its fitted table")
        lookup_file = f"{name}.lookup.json"
        save_table(dict(lookup), folder / lookup_file)
    profile = folder / f"{name}.toml"
    atomic_write_bytes(profile, profile_text(name, rule, lookup_file).encode("utf-8"))
    return profile
