"""Run a sweep: quantize each recipe, run the cohort, compare with the reference.

Input: a sweep spec (``experiments.spec``) and an output directory.
Output, under ``OUT``::

    cohort.jsonl, cohort-rows.jsonl     the built cohort and the rows the sweep runs
    reference/                          the reference run + reference_logprobs.npz
    artifacts/<recipe>-<key>[.lock.toml, .quantize.json]   (or the spec's artifacts dir;
                                        key = sha256 of recipe file + source lock file)
    runs/<name>/                        records, artifact.json, divergence.json, summary.json
    rules/<name>.toml [.lookup.json]    each rule baseline's run profile (and lookup table);
                                        its run is ``guardrepro run`` with that profile
    summary.json, summary.md            one row per configuration
    frontier.json, frontier.md, frontier.png, kl.png, margins.png

Invariants (resumable, no duplicate work, nothing half-written):
- ``runs/<name>/summary.json`` is written last for a configuration; a
  configuration that has it is skipped on a rerun.
- An artifact is reused when its lock exists beside it (``quantize`` writes
  the lock, then renames the finished directory into place; a lock without
  its directory is a crash in between: the sidecars are removed and the
  recipe converted again). Reused artifacts are verified through their lock
  when the run materializes them.
- Runs resume through ``pipeline.run_cohort`` (records already written are not
  regenerated); the reference log-probs and each ``divergence.json`` are
  written atomically, once.
- ``sweep --engine ray`` (``experiments.sweep_ray``) first builds every
  recipe's artifact here, once, and pins it (``pins.json``: each artifact's
  lock and verified tree hash) before any run reads it; then the reference's
  and every configuration's cohort runs go, recipe x shard units side by
  side, into one actor pool of one Ray job, the driver (this process)
  owning every record store; then the loop below finishes each
  configuration (divergence, compare, summary) as in a local sweep, and the
  reference's teacher log-probabilities are computed once, here.
- On a CPU-only MLX a recipe's ``cpu_recipe`` (float32 scales) replaces it;
  the summary names the recipe that actually ran and the device.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guardrepro.artifacts.nofollow import make_dirs, refuse_links
from guardrepro.artifacts.quantize.recipe import Recipe
from guardrepro.artifacts.store import read_hashed
from guardrepro.errors import InputError, missing_extra
from guardrepro.experiments.artifact_side import ARTIFACT_SIDE, artifact_bytes, write_artifact_side
from guardrepro.experiments.divergence import REFERENCE_FILE
from guardrepro.experiments.frontier import FrontierReport
from guardrepro.experiments.spec import RecipeEntry, RuleEntry, SweepSpec, load_sweep
from guardrepro.progress import progress_bar
from guardrepro.rundir.leftovers import refused_leaves_no_output
from guardrepro.rundir.outputs import write_json_atomic
from guardrepro.rundir.records import write_atomic

if TYPE_CHECKING:
    from guardrepro.experiments.outputs import SummaryRow

Say = Callable[[str], None]


@dataclass
class SweepResult:
    out: Path
    device: str
    actions: list[str] = field(default_factory=list)
    summary: list[SummaryRow] = field(default_factory=list)
    frontier: FrontierReport | None = None
    # how each configuration's cohort run is executed: None = pipeline.run_cohort
    # here; `sweep --engine ray`: the summaries of the runs made on Ray
    run: Callable[..., Any] | None = None
    # each rule baseline's profile and lookup table, written once (``_rule_profile``)
    rule_profiles: dict[str, tuple[Path, dict[str, Any] | None]] = field(default_factory=dict)


def mlx_device() -> str:
    try:
        import mlx.core as mx
    except ImportError as exc:
        raise missing_extra("a quantization sweep", "mlx", "mlx") from exc

    return str(mx.default_device())


def _cohort(spec: SweepSpec, out: Path, home: str | Path | None) -> Path:
    from guardrepro.artifacts.fetch import fetch_lock, materialize
    from guardrepro.bench.cohort.build import build_cohort_file
    from guardrepro.bench.cohort.spec import load_spec
    from guardrepro.rundir.cohort import read_cohort

    full, rows_file = out / "cohort.jsonl", out / "cohort-rows.jsonl"
    if rows_file.exists():
        return rows_file
    if not full.exists():
        data_lock = load_spec(spec.cohort).data_lock
        fetch_lock(data_lock, home, progress=False)
        build_cohort_file(spec.cohort, materialize(data_lock, home), full)
    lines = full.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = read_cohort(full)
    keep = [line for line, row in zip(lines, rows, strict=True)
            if spec.rows == "all" or row.variant == "original"]
    if spec.limit:
        keep = keep[:spec.limit]
    write_atomic(rows_file, "".join(keep))
    return rows_file


def _artifact(recipe: Recipe, spec: SweepSpec, out: Path, home: str | Path | None,
              result: SweepResult) -> Path:
    from guardrepro.artifacts.quantize.convert import quantize
    from guardrepro.artifacts.quantize.pin import lock_path_for, provenance_path_for

    folder = spec.artifacts or make_dirs(out / "artifacts", trusted=out)
    # keyed by recipe and source: a shared artifacts folder never mixes two sources
    source = read_hashed(spec.source_lock)[1]
    key = hashlib.sha256(f"{recipe.sha256}:{source}".encode()).hexdigest()[:12]
    target = folder / f"{recipe.name}-{key}"
    lock = lock_path_for(target)
    if lock.exists() and target.is_dir():
        result.actions.append(f"reuse artifact {recipe.name}")
        return lock
    for stale in (lock, provenance_path_for(target)):
        stale.unlink(missing_ok=True)
    if target.exists():
        raise InputError("artifact directory without its lock; remove it to rebuild",
                         file=str(target))
    q = quantize(Path(recipe.path), spec.source_lock, target,
                 home=None if home is None else Path(home))
    result.actions.append(f"quantize {recipe.name}")
    if recipe.quantize and not q.quantized:
        raise InputError(f"recipe {recipe.name!r} quantized no weight", file=recipe.path)
    return lock


def _recipe_config(entry: RecipeEntry, spec: SweepSpec, out: Path, cohort: Path,
                   ref_logprobs: Path, home: str | Path | None, result: SweepResult,
                   progress: bool) -> None:
    from guardrepro.checks.parity.compare import compare_runs
    from guardrepro.experiments.teacher import candidate_divergence
    from guardrepro.run.pipeline import run_cohort
    from guardrepro.run.profile import RunProfile

    recipe = entry.chosen(result.device.startswith("Device(cpu"))
    run_dir = out / "runs" / recipe.name
    if (run_dir / "summary.json").exists():
        result.actions.append(f"skip {recipe.name} (done)")
        return
    lock = _artifact(recipe, spec, out, home, result)
    profile = RunProfile.load(spec.candidate_profile).with_checkpoint_lock(lock)
    refuse_links(run_dir, trusted=out)  # no planted symlink on the way is followed
    summary = (result.run or run_cohort)(profile, cohort, run_dir, progress=progress,
                                         home=home)
    result.actions.append(f"run {recipe.name}: {summary.generated} generated")
    write_artifact_side(run_dir, lock, recipe=recipe.to_dict(),
                        requested_recipe=entry.recipe.name, device=result.device)
    divergence_file = run_dir / "divergence.json"
    if not divergence_file.exists():
        div = candidate_divergence(profile, ref_logprobs, home=home, progress=progress,
                                   label=f"divergence {recipe.name}")
        write_json_atomic(divergence_file, div)
        result.actions.append(f"divergence {recipe.name}")
    div = json.loads(divergence_file.read_text(encoding="utf-8"))
    comparison = compare_runs(out / "reference", run_dir).summary().to_dict()
    write_json_atomic(run_dir / "summary.json", {
        "name": recipe.name, "kind": "recipe", "recipe": recipe.to_dict(),
        "requested_recipe": entry.recipe.name, "device": result.device,
        "artifact_bytes": artifact_bytes(lock), "run": summary.to_dict(),
        "compare": comparison, "divergence": div["overall"]})


def _rule_profile(entry: RuleEntry, spec: SweepSpec, out: Path, cohort: Path,
                  home: str | Path | None,
                  result: SweepResult) -> tuple[Path, dict[str, Any] | None]:
    """The rule baseline's run profile under ``rules/`` (and its fitted lookup
    table), written once per sweep invocation."""
    from guardrepro.experiments.rule_runs import fit_lookup_table, write_rule_profile
    from guardrepro.rundir.cohort import read_cohort

    if entry.name not in result.rule_profiles:
        table = None
        if entry.rule == "lookup":
            table = fit_lookup_table(spec.cohort, read_cohort(cohort), entry.train_split, home)
        path = write_rule_profile(entry.name, entry.rule, make_dirs(out / "rules", trusted=out),
                                  table)
        result.rule_profiles[entry.name] = (path, table)
    return result.rule_profiles[entry.name]


def _rule_config(entry: RuleEntry, spec: SweepSpec, out: Path, cohort: Path,
                 home: str | Path | None, result: SweepResult, progress: bool) -> None:
    """A rule baseline: its run profile written under ``rules/``, then run like any
    profile (``experiments.rule_runs``)."""
    from guardrepro.run.pipeline import run_cohort
    from guardrepro.run.profile import RunProfile

    name = entry.name
    run_dir = out / "runs" / name
    if (run_dir / "summary.json").exists():
        result.actions.append(f"skip {name} (done)")
        return
    profile_path, table = _rule_profile(entry, spec, out, cohort, home, result)
    refuse_links(run_dir, trusted=out)
    summary = (result.run or run_cohort)(RunProfile.load(profile_path), cohort, run_dir,
                                         progress=progress, home=home)
    result.actions.append(f"rule {name}: {summary.generated} rows")
    write_json_atomic(run_dir / ARTIFACT_SIDE, {"artifact_bytes": 0, "rule": entry.rule,
                                                  "profile": str(profile_path)})
    lookup = None if table is None else {
        "train_split": entry.train_split, "train_rows": table["rows"],
        "keys": len(table["table"]), "fallback": table["fallback"]}
    write_json_atomic(run_dir / "summary.json", {
        "name": name, "kind": "rule", "rule": entry.rule, "lookup": lookup,
        "artifact_bytes": 0, "run": summary.to_dict()})


def _reference(spec: SweepSpec, out: Path, cohort: Path, home: str | Path | None,
               result: SweepResult, progress: bool) -> Path:
    from guardrepro.artifacts.locks import load_lock
    from guardrepro.experiments.teacher import build_reference
    from guardrepro.run.pipeline import run_cohort
    from guardrepro.run.profile import RunProfile

    ref_dir = make_dirs(out / "reference", trusted=out)
    profile = RunProfile.load(spec.reference_profile)
    summary = (result.run or run_cohort)(profile, cohort, ref_dir, progress=progress,
                                         home=home)
    result.actions.append(f"reference: {summary.generated} generated")
    lock = profile.checkpoint.lock
    size = None if lock is None else sum(int(f.size or 0) for f in load_lock(lock).files)
    write_json_atomic(ref_dir / ARTIFACT_SIDE, {"artifact_bytes": size,
                                                  "profile": str(spec.reference_profile)})
    target = ref_dir / REFERENCE_FILE
    if not target.exists():
        build_reference(profile, ref_dir, target, home=home, progress=progress)
        result.actions.append("reference log-probs")
    return target


def run_sweep(spec_path: str | Path, out_dir: str | Path, *, home: str | Path | None = None,
              progress: bool = True, say: Say = print,
              runs: Callable[..., Callable[..., Any]] | None = None) -> SweepResult:
    """Run (or resume) the sweep; see the module docstring. ``runs`` (``sweep
    --engine ray``: ``sweep_ray.run_configurations``) is called once the cohort
    is built, as ``runs(spec, out, cohort, home, result, progress)``, and
    returns what replaces ``pipeline.run_cohort`` for every cohort run."""
    spec = load_sweep(spec_path)
    out = Path(out_dir).resolve()
    with refused_leaves_no_output(out):  # a refused sweep leaves no --out it made
        return _run_sweep(spec, out, home=home, progress=progress, say=say, runs=runs)


def _run_sweep(spec: SweepSpec, out: Path, *, home: str | Path | None, progress: bool,
               say: Say, runs: Callable[..., Callable[..., Any]] | None) -> SweepResult:
    from guardrepro.artifacts.fetch import fetch_lock

    out.mkdir(parents=True, exist_ok=True)
    result = SweepResult(out=out, device=mlx_device())
    fetch_lock(spec.source_lock, home, progress=False)
    cohort = _cohort(spec, out, home)
    if runs is not None:
        result.run = runs(spec, out, cohort, home, result, progress)
    total = 1 + len(spec.recipes) + len(spec.rules)
    bar = progress_bar(total, f"sweep {spec.name}", "config", enabled=progress)
    try:
        ref_logprobs = _reference(spec, out, cohort, home, result, progress)
        bar.update(1)
        for entry in spec.recipes:
            started = time.perf_counter()
            _recipe_config(entry, spec, out, cohort, ref_logprobs, home, result, progress)
            say(f"{entry.chosen(result.device.startswith('Device(cpu')).name}: "
                f"{time.perf_counter() - started:.1f} s")
            bar.update(1)
        for rule in spec.rules:
            _rule_config(rule, spec, out, cohort, home, result, progress)
            bar.update(1)
    finally:
        bar.close()
    from guardrepro.experiments.outputs import config_dirs, write_outputs
    from guardrepro.run.parse_warning import run_warning

    result.summary, result.frontier = write_outputs(spec, out, result.device)
    for name, folder in config_dirs(spec, out, result.device):
        warning = run_warning(folder)
        if warning is not None:
            say(f"{name}: {warning}")
    return result
