"""Sweep specs: the declarative TOML files under ``quantize/sweeps/``.

Input: a sweep TOML file. Output: a frozen ``SweepSpec`` whose paths are
resolved against the spec file's folder.

Format (keys outside it are an error)::

    [sweep]
    name = "toy"
    source_lock = "../../locks/toy-guard.toml"     # the checkpoint every recipe converts
    cohort = "../../cohorts/toy-64.toml"           # cohort spec, built into the sweep dir
    rows = "originals"                             # "originals" or "all"
    limit = 32                                     # optional, >= 1: the first N rows (absent: all)
    reference_profile = "../../runners/toy-hf.toml"
    reference_name = "hf-fp32"
    candidate_profile = "../../runners/toy-mlx-q8.toml"   # checkpoint replaced per recipe
    artifacts = "../../artifacts/sweeps"           # optional; default <out>/artifacts
    costs = { FN = 1.0, FP = 1.0 }
    axes = ["memory", "harm"]
    replicates = 2000
    seed = 260828

    [[recipe]]
    recipe = "../q8-g64.toml"
    cpu_recipe = "../q8-g64-f32.toml"   # optional: used instead when MLX runs on the CPU

    [[rule]]
    name = "rule-lookup"
    rule = "lookup"                     # "nuisance" or "lookup"
    train_split = "benchmark-minus-cohort"

Invariants: every recipe file is parsed (``quantize_recipe.load_recipe``)
when the spec loads, so a bad recipe fails before anything runs; the
configuration names (reference, recipe names after the CPU choice, rules) are
unique; the source lock, cohort spec and profiles must exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.artifacts.locks import NAME
from guardrepro.artifacts.quantize.recipe import Recipe, load_recipe
from guardrepro.artifacts.store import sha256_bytes
from guardrepro.checks.core.bootstrap import DEFAULT_SEED, QUICK_REPLICATES
from guardrepro.errors import InputError
from guardrepro.experiments.frontier import AXES
from guardrepro.experiments.rule_runs import RULES
from guardrepro.guards.rule.lookup import TRAIN_SPLITS
from guardrepro.spec import check_keys, expect_kind, parse_toml, type_problem

_SWEEP_KEYS = {"name", "source_lock", "cohort", "rows", "limit", "reference_profile",
               "reference_name", "candidate_profile", "artifacts", "costs", "axes",
               "replicates", "seed"}
_REQUIRED = {"name", "source_lock", "cohort", "reference_profile", "candidate_profile"}


@dataclass(frozen=True)
class RecipeEntry:
    recipe: Recipe
    cpu_recipe: Recipe | None

    def chosen(self, on_cpu: bool) -> Recipe:
        return self.cpu_recipe if on_cpu and self.cpu_recipe is not None else self.recipe


@dataclass(frozen=True)
class RuleEntry:
    name: str
    rule: str
    train_split: str


@dataclass(frozen=True)
class SweepSpec:
    name: str
    path: Path
    sha256: str
    source_lock: Path
    cohort: Path
    rows: str
    limit: int
    reference_profile: Path
    reference_name: str
    candidate_profile: Path
    artifacts: Path | None
    costs: Mapping[str, float]
    axes: tuple[str, str]
    replicates: int
    seed: int
    recipes: tuple[RecipeEntry, ...]
    rules: tuple[RuleEntry, ...]

    def names(self, on_cpu: bool) -> list[str]:
        return ([self.reference_name] + [e.chosen(on_cpu).name for e in self.recipes]
                + [r.name for r in self.rules])


def _path(base: Path, value: Any, *, file: str, field: str, must_exist: bool = True) -> Path:
    if not isinstance(value, str) or not value:
        raise InputError("expected a non-empty path string", file=file, field=field)
    path = (base / value).resolve()
    if must_exist and not path.exists():
        raise InputError(f"not found: {path}", file=file, field=field)
    return path


def _int(table: Mapping[str, Any], key: str, default: int, *, file: str, minimum: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"expected an integer >= {minimum}, got {value!r}", file=file,
                         field=f"sweep.{key}")
    return value


def _costs(value: Any, file: str) -> dict[str, float]:
    costs = {"FN": 1.0, "FP": 1.0}
    if value is None:
        return costs
    if not isinstance(value, Mapping):
        raise InputError(type_problem(value, dict), file=file, field="sweep.costs")
    check_keys(value, costs, file=file, where="sweep.costs")
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, int | float) or item < 0:
            raise InputError("expected a number >= 0", file=file, field=f"sweep.costs.{key}")
        costs[key] = float(item)
    return costs


def _check_name(name: str, file: str, field: str) -> None:
    """Configuration names become directory and file names under ``--out``: they
    follow the lock-name rule, so ``../x`` or ``a/b`` cannot escape it."""
    if not NAME.fullmatch(name):
        raise InputError(f"name {name!r} must be lowercase [a-z0-9._-], starting alphanumeric"
                         " (it names a directory under --out)", file=file, field=field)


def _recipes(raw: Any, base: Path, file: str) -> tuple[RecipeEntry, ...]:
    if not isinstance(raw, list) or not raw:
        raise InputError("needs at least one [[recipe]]", file=file, field="recipe")
    out = []
    for i, item in enumerate(raw):
        where = f"recipe[{i}]"
        if not isinstance(item, Mapping):
            raise InputError(type_problem(item, dict), file=file, field=where)
        check_keys(item, ("recipe", "cpu_recipe"), file=file, where=where, required=("recipe",))
        main = load_recipe(_path(base, item.get("recipe"), file=file, field=f"{where}.recipe"))
        _check_name(main.name, file, f"{where}.recipe (its name)")
        cpu = None
        if "cpu_recipe" in item:
            cpu = load_recipe(_path(base, item["cpu_recipe"], file=file,
                                    field=f"{where}.cpu_recipe"))
            _check_name(cpu.name, file, f"{where}.cpu_recipe (its name)")
        out.append(RecipeEntry(main, cpu))
    return tuple(out)


def _rules(raw: Any, file: str) -> tuple[RuleEntry, ...]:
    if not isinstance(raw, list):
        raise InputError("expected an array of tables ([[rule]])", file=file, field="rule")
    out = []
    for i, item in enumerate(raw):
        where = f"rule[{i}]"
        if not isinstance(item, Mapping):
            raise InputError(type_problem(item, dict), file=file, field=where)
        check_keys(item, ("name", "rule", "train_split"), file=file, where=where)
        rule = item.get("rule")
        if rule not in RULES:
            raise InputError(f"rule must be one of {RULES}", file=file, field=f"{where}.rule")
        split = item.get("train_split", "benchmark-minus-cohort")
        if split not in TRAIN_SPLITS:
            raise InputError(f"train_split must be one of {TRAIN_SPLITS}", file=file,
                             field=f"{where}.train_split")
        name = item.get("name", f"rule-{rule}")
        if not isinstance(name, str) or not name:
            raise InputError("expected a non-empty string", file=file, field=f"{where}.name")
        _check_name(name, file, f"{where}.name")
        out.append(RuleEntry(name, rule, split))
    return tuple(out)


def load_sweep(path: str | Path) -> SweepSpec:
    """Parse and validate a sweep spec; every problem names file and field."""
    path = Path(path).resolve()
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read sweep spec: {exc}", file=file) from exc
    data = parse_toml(raw, file)[0]
    expect_kind(data, "sweep", file=file)
    check_keys(data, ("sweep", "recipe", "rule"), file=file, required=("sweep",))
    table = data["sweep"]
    if not isinstance(table, Mapping):
        raise InputError(type_problem(table, dict), file=file, field="sweep")
    check_keys(table, _SWEEP_KEYS, file=file, where="sweep", required=_REQUIRED)
    for key in ("name", "reference_name"):
        if key in table and not (isinstance(table[key], str) and table[key]):
            raise InputError(f"expected a non-empty string, got {table[key]!r}", file=file,
                             field=f"sweep.{key}")
        if key in table:
            _check_name(table[key], file, f"sweep.{key}")
    base = path.parent
    rows = table.get("rows", "originals")
    if rows not in ("originals", "all"):
        raise InputError("rows must be 'originals' or 'all'", file=file, field="sweep.rows")
    axes = table.get("axes", ["memory", "harm"])
    if not isinstance(axes, list) or len(axes) != 2 or any(a not in AXES for a in axes):
        raise InputError(f"axes must be two of {sorted(AXES)}", file=file, field="sweep.axes")
    artifacts = table.get("artifacts")
    spec = SweepSpec(
        name=table["name"], path=path, sha256=sha256_bytes(raw),
        source_lock=_path(base, table["source_lock"], file=file, field="sweep.source_lock"),
        cohort=_path(base, table["cohort"], file=file, field="sweep.cohort"),
        rows=rows,
        limit=_int(table, "limit", 1, file=file, minimum=1) if "limit" in table else 0,
        reference_profile=_path(base, table["reference_profile"], file=file,
                                field="sweep.reference_profile"),
        reference_name=table.get("reference_name", "reference"),
        candidate_profile=_path(base, table["candidate_profile"], file=file,
                                field="sweep.candidate_profile"),
        artifacts=None if artifacts is None else _path(base, artifacts, file=file,
                                                       field="sweep.artifacts",
                                                       must_exist=False),
        costs=_costs(table.get("costs"), file),
        axes=(axes[0], axes[1]),
        replicates=_int(table, "replicates", QUICK_REPLICATES, file=file, minimum=1),
        seed=_int(table, "seed", DEFAULT_SEED, file=file, minimum=0),
        recipes=_recipes(data.get("recipe"), base, file),
        rules=_rules(data.get("rule", []), file),
    )
    for on_cpu in (False, True):
        names = spec.names(on_cpu)
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InputError(f"configuration names must be unique; repeated: {dupes}",
                             file=file, field="recipe")
    return spec
