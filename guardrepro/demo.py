"""The embedded default, end to end, with no network.

Input: nothing but the repository (the toy guard and toy benchmark ship in
the package, pinned by ``locks/toy-guard.toml`` and ``locks/toy-bench.toml``).
Output: a demo directory holding the toy cohort, a transformers run and (when
MLX is installed) an MLX Q8 group-64 run of the toy guard, their comparison,
and on the transformers run the parity gate against the shipped reference
run, ``stats.json``, the report and the HTML report; with ``sampled=K``, K
seeded sampled runs and the attribution of every disagreement. Every step
goes through the same public functions as the CLI verbs; the demo only wires
them together and prints a short summary.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from guardrepro.artifacts.nofollow import make_dirs, refuse_links
from guardrepro.checks.core.bootstrap import DEFAULT_SEED, QUICK_REPLICATES
from guardrepro.checks.core.formatting import frac_equals, yes_no_unpinned
from guardrepro.errors import GateFailed, InputError, missing_extra

if TYPE_CHECKING:
    from guardrepro.checks.parity.attribute import Attribution
    from guardrepro.checks.parity.compare import Comparison
    from guardrepro.checks.parity.gate import GateResult
    from guardrepro.checks.parity.toolsafe_table import ToolsafeTable
    from guardrepro.checks.report.markdown import ReportInputs
    from guardrepro.checks.stats.compute import StatsResult

Say = Callable[[str], None]


def repo_root() -> Path:
    """The directory holding the spec folders (``runners/``, ``cohorts/`` ...): the
    source checkout, or the copy a wheel ships (``guardrepro.spec_dirs.spec_root``)."""
    from guardrepro.spec_dirs import spec_root

    return spec_root()


@dataclass
class DemoResult:
    """What the demo produced: run directories and the checks' typed results."""

    out_dir: Path
    cohort: Path
    runs: dict[str, Path] = field(default_factory=dict)
    comparison: Comparison | None = None
    gate: GateResult | None = None
    stats: StatsResult | None = None
    report: Path | None = None
    html: Path | None = None
    attribution: Attribution | None = None
    attribution_table: str | None = None
    mlx_plan: MlxPlan | None = None
    table: ToolsafeTable | None = None  # ToolSafe's table of the rule guard on a toy split
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def gate_passed(self) -> bool:
        return self.gate is not None and self.gate.passed


def mlx_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("mlx", "mlx_lm"))


@dataclass(frozen=True)
class MlxPlan:
    """Which Q8 recipe and which cohort rows the demo's MLX step uses.

    On a Mac (MLX on the GPU) the published recipe ``q8-g64`` (bfloat16 scales)
    runs all rows. MLX's CPU backend runs bfloat16 quantized matmuls about 7x
    slower than float32 ones (measured on the toy guard: ~7 s a row vs ~1 s),
    so on CPU the demo uses ``q8-g64-f32`` (the same 8-bit group-64 affine
    codes with float32 scales) on the 64 original rows, to stay within minutes.
    """

    recipe: str
    rows: str  # "all" or "originals"
    device: str


def mlx_plan() -> MlxPlan:
    try:
        import mlx.core as mx
    except ImportError as exc:
        raise missing_extra("the MLX part of the demo", "mlx", "mlx") from exc

    device = str(mx.default_device())
    if mx.default_device() == mx.gpu:
        return MlxPlan("quantize/q8-g64.toml", "all", device)
    return MlxPlan("quantize/q8-g64-f32.toml", "originals", device)


def write_originals(cohort: Path, out: Path) -> Path:
    """Copy the cohort's original-variant lines (byte for byte) to ``out``."""
    from guardrepro.rundir.records import write_atomic

    lines = cohort.read_text(encoding="utf-8").splitlines(keepends=True)
    keep = [line for line in lines if json.loads(line)["variant"] == "original"]
    write_atomic(out, "".join(keep))
    return out


class _Steps:
    """Numbered step headers and per-step wall times into ``result.seconds``."""

    def __init__(self, result: DemoResult, total: int, say: Say) -> None:
        self.result, self.total, self.say = result, total, say
        self._done = 0
        self._clock = time.perf_counter()

    def start(self, text: str) -> None:
        self._done += 1
        self.say(f"[{self._done}/{self.total}] {text}")

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.result.seconds[name] = round(now - self._clock, 2)
        self._clock = now


def run_demo(
    out_dir: str | Path,
    *,
    home: str | Path | None = None,
    with_mlx: bool | None = None,
    replicates: int = QUICK_REPLICATES,
    progress: bool = True,
    say: Say = print,
    sampled: int = 0,
) -> DemoResult:
    """Run the whole pipeline on the embedded default into ``out_dir``.

    ``out_dir`` must not hold an earlier demo's records of another
    provenance (runs resume; a mismatch is refused). ``with_mlx=None``
    runs the MLX Q8 step when mlx and mlx-lm are importable. ``sampled=K``
    adds K seeded sampled runs of the originals and the attribution of every
    disagreement with the reference (``attribute_step``).
    """
    root = repo_root()
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    use_mlx = mlx_available() if with_mlx is None else with_mlx
    result = DemoResult(out_dir=out, cohort=out / "cohort.jsonl")
    steps = _Steps(result, 8 if use_mlx else 6, say)

    _verify_and_build(root, result, steps, home)
    hf_dir = _run_hf(root, result, steps, progress, home)
    if use_mlx:
        _run_mlx(root, result, steps, progress, home)
    inputs = _gate_and_stats(root, result, steps, hf_dir, replicates, home)
    _split_table(root, result, steps, replicates, progress, home)
    if sampled:
        say(f"[extra] {sampled} sampled repeats (runners/toy-hf-sampled.toml, seeds 1..{sampled}) "
            "on the 64 original rows, then attribution of every disagreement")
        result.attribution = attribute_step(root, out, result, sampled, replicates=replicates,
                                            progress=progress, home=home)
        steps.mark("sampled_attribution")
    from guardrepro.checks.report.html import build_html

    result.html = build_html(hf_dir, home=home, inputs=inputs)
    _record_last(hf_dir, home)
    return result


LAST_DEMO = "state/last-demo.json"


def _record_last(hf_dir: Path, home: str | Path | None) -> None:
    """Remember the demo's transformers run (the notebooks' default run)."""
    from guardrepro.artifacts.store import atomic_write_bytes, ensure_dir, guardrepro_home

    cache = guardrepro_home(home)
    ensure_dir(cache, "state")
    atomic_write_bytes(cache / LAST_DEMO, json.dumps({"run_dir": str(hf_dir)}).encode())


def last_demo_run(home: str | Path | None = None) -> Path:
    """The transformers run directory of the last finished ``guardrepro demo`` (as
    recorded under the cache home); InputError when there is none on disk."""
    from guardrepro.artifacts.store import guardrepro_home

    state = guardrepro_home(home) / LAST_DEMO
    try:
        run_dir = Path(json.loads(state.read_text())["run_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        raise InputError(f"no finished demo recorded ({state}): run `guardrepro demo`, or"
                         " set GUARDREPRO_RUN_DIR to a run directory") from None
    if not (run_dir / "records.jsonl").is_file():
        raise InputError(f"the last demo's run {run_dir} is gone: run `guardrepro demo`, or"
                         " set GUARDREPRO_RUN_DIR to a run directory", file=str(state))
    return run_dir


def _verify_and_build(root: Path, result: DemoResult, steps: _Steps,
                      home: str | Path | None) -> None:
    """Steps 1-2: fetch and verify the pinned toy guard and benchmark; build the cohort."""
    from guardrepro.artifacts.fetch import fetch_lock
    from guardrepro.artifacts.verify import verify_lock
    from guardrepro.bench.cohort.build import build_cohort_file

    steps.start("verify the pinned toy guard and toy benchmark")
    for pinned in ("locks/toy-guard.toml", "locks/toy-bench.toml"):
        fetch_lock(root / pinned, home, progress=False)
        verify_lock(root / pinned, home).raise_for_status()
    steps.mark("verify")

    steps.start("build the toy cohort (cohorts/toy-64.toml)")
    if not result.cohort.exists():
        manifest = build_cohort_file(root / "cohorts/toy-64.toml", None, result.cohort,
                                     home=home)
        steps.say(f"      {manifest['rows']} rows, sha256 {manifest['sha256'][:16]}...; "
                  f"matches the spec's pinned hash: {manifest['sha256_matches']}")
    steps.mark("cohort")


def _run_hf(root: Path, result: DemoResult, steps: _Steps, progress: bool,
            home: str | Path | None) -> Path:
    """Step 3: the transformers run of the toy guard; returns its directory."""
    from guardrepro.run.profile import RunProfile
    from guardrepro.run.workers import run_with_workers

    steps.start("run the toy guard with transformers (runners/toy-hf.toml)")
    hf_dir = refuse_links(result.out_dir / "hf-fp32", trusted=result.out_dir)
    hf_profile = RunProfile.load(root / "runners/toy-hf.toml")
    run_with_workers(hf_profile, result.cohort, hf_dir, workers=hf_profile.workers,
                     progress=progress, home=home)
    result.runs["hf-fp32"] = hf_dir
    steps.mark("run_hf")
    return hf_dir


def _run_mlx(root: Path, result: DemoResult, steps: _Steps, progress: bool,
             home: str | Path | None) -> None:
    """Steps 4-5: quantize to MLX Q8 g64, run it, compare with transformers."""
    from guardrepro.artifacts.quantize.convert import quantize
    from guardrepro.checks.parity.compare import compare_runs
    from guardrepro.experiments.artifact_side import write_artifact_side
    from guardrepro.run.pipeline import run_cohort
    from guardrepro.run.profile import RunProfile
    from guardrepro.rundir.outputs import write_json_atomic

    out = result.out_dir
    plan = mlx_plan()
    result.mlx_plan = plan
    steps.start(f"quantize the toy guard to MLX Q8 g64 ({plan.recipe})")
    # artifacts/ made beneath --out, a link planted there refused (as a sweep's)
    artifact = make_dirs(out / "artifacts", trusted=out) / "toy-guard-mlx-q8"
    lock = artifact.parent / f"{artifact.name}.lock.toml"
    if not lock.exists():
        q = quantize(root / plan.recipe, root / "locks/toy-guard.toml",
                     artifact, home=Path(home) if home else None)
        steps.say(f"      {len(q.quantized)} weights quantized; tree {q.tree_sha256[:16]}...; "
                  f"expected tree hash matched: {yes_no_unpinned(q.expected_match)}")
    steps.mark("quantize")

    scope = "all rows" if plan.rows == "all" else "the 64 original rows"
    steps.start(f"run the Q8 artifact with MLX on {plan.device} ({scope}) "
                "and compare with transformers")
    mlx_cohort: Path = result.cohort
    if plan.rows == "originals":
        mlx_cohort = write_originals(result.cohort, out / "cohort-originals.jsonl")
    profile = RunProfile.load(root / "runners/toy-mlx-q8.toml").with_checkpoint_lock(lock)
    mlx_dir = refuse_links(out / "mlx-q8", trusted=out)
    run_cohort(profile, mlx_cohort, mlx_dir, progress=progress, home=home)
    write_artifact_side(mlx_dir, lock)  # the frontier's bytes axis: this run's lock
    result.runs["mlx-q8"] = mlx_dir
    # on the originals subset the two runs' cohorts differ by design: compare the
    # rows they share (the 64 originals)
    result.comparison = compare_runs(result.runs["hf-fp32"], mlx_dir,
                                     shared_rows=plan.rows == "originals")
    write_json_atomic(out / "compare-hf-fp32-vs-mlx-q8.json", result.comparison.to_dict())
    steps.mark("run_mlx")


def _gate_and_stats(root: Path, result: DemoResult, steps: _Steps, hf_dir: Path,
                    replicates: int, home: str | Path | None) -> ReportInputs:
    """The last two steps: the parity gate, then stats.json and the report; returns
    what the report was made of (the HTML report takes it too)."""
    from guardrepro.checks.parity.gate import evaluate, load_spec, reference_rows
    from guardrepro.checks.report.markdown import (
        FIGURES_NOTE,
        ReportInputs,
        build_report,
        figures_available,
    )
    from guardrepro.checks.stats.cache import keyed
    from guardrepro.checks.stats.compute import compute_stats
    from guardrepro.rundir.outputs import GATE_JSON, write_json_atomic, write_stats
    from guardrepro.rundir.read import load_run_data

    steps.start("parity gate against the shipped reference (checks/toy-guard.toml)")
    run = load_run_data(hf_dir)
    spec = load_spec(root / "checks/toy-guard.toml")
    key_field, reference, ref_info = reference_rows(spec, home)
    result.gate = evaluate(spec, run.rows, key_field=key_field,
                           reference=reference).with_extra(reference=ref_info)
    write_json_atomic(hf_dir / GATE_JSON, result.gate.to_dict())
    steps.mark("gate")

    steps.start("statistics and report")
    result.stats = keyed(compute_stats(run.rows, replicates=replicates, seed=DEFAULT_SEED,
                                       expected_source=run.expected_source), run)
    write_stats(hf_dir, None, result.stats.to_dict())
    inputs = ReportInputs(run, result.stats, result.gate)
    result.report = build_report(hf_dir, inputs=inputs)
    if not figures_available():
        steps.say(FIGURES_NOTE)
    steps.mark("stats_report")
    return inputs


def attribute_step(root: Path, out: Path, result: DemoResult, k: int, *, replicates: int,
                   progress: bool, home: str | Path | None) -> Attribution:
    """K seeded sampled runs of the originals, then ``guardrepro attribute``
    against the shipped reference; writes ``hf-fp32/attribution.json``."""
    import dataclasses

    from guardrepro.checks.parity.attribute import attribute, format_table
    from guardrepro.checks.parity.loaders import load_reference, load_run_input
    from guardrepro.run.pipeline import run_cohort
    from guardrepro.run.profile import RunProfile
    from guardrepro.rundir.outputs import write_json_atomic

    originals = out / "cohort-originals.jsonl"
    if not originals.exists():
        write_originals(result.cohort, originals)
    profile = RunProfile.load(root / "runners/toy-hf-sampled.toml")
    dirs = []
    for seed in range(1, k + 1):
        seeded = profile.with_decoding(dataclasses.replace(profile.decoding, seed=seed))
        run_dir = refuse_links(out / f"sampled-s{seed}", trusted=out)
        run_cohort(seeded, originals, run_dir, progress=progress, home=home)
        dirs.append(run_dir)
    ref, key_field, info = load_reference(root / "checks/toy-guard.toml", home)
    quantized = [result.runs["mlx-q8"]] if "mlx-q8" in result.runs else []
    att = attribute(ref, key_field=key_field, reference_info=info,
                    bf16=load_run_input(result.runs["hf-fp32"], key_field),
                    quantized=[load_run_input(q, key_field) for q in quantized],
                    sampled=[load_run_input(d, key_field) for d in dirs],
                    replicates=replicates)
    write_json_atomic(result.runs["hf-fp32"] / "attribution.json", att.to_dict())
    result.attribution_table = format_table(att)
    return att


def _split_table(root: Path, result: DemoResult, steps: _Steps, replicates: int,
                 progress: bool, home: str | Path | None) -> None:
    """The last step: every row of the toy ASB split through the rule guard, then
    ToolSafe's table of it (``guardrepro table``), written to ``table.json``."""
    from guardrepro.artifacts.fetch import materialize
    from guardrepro.bench.cohort.split import build_any_cohort_file
    from guardrepro.bench.tsbench import load_benchmark
    from guardrepro.checks.parity.toolsafe_table import load_published_tables, toolsafe_table
    from guardrepro.run.pipeline import run_cohort
    from guardrepro.rundir.outputs import write_json_atomic

    steps.start("whole split: the rule guard on every row of the toy ASB split, "
                "ToolSafe's table (cohorts/toy-asb-all.toml)")
    data = Path(materialize(root / "locks/toy-bench.toml", home))
    cohort = result.out_dir / "toy-asb-all.jsonl"
    if not cohort.exists():
        build_any_cohort_file(root / "cohorts/toy-asb-all.toml", data, cohort)
    run_dir = refuse_links(result.out_dir / "rule-asb-all", trusted=result.out_dir)
    run_cohort(root / "runners/rule-nuisance.toml", cohort, run_dir, progress=progress,
               home=home)
    result.runs["rule-asb-all"] = run_dir
    published = load_published_tables(root / "checks/published/toolsafe-tables.toml")
    result.table = toolsafe_table([run_dir], load_benchmark(data, "asb"), "asb", "strict",
                                  published, replicates=replicates)
    write_json_atomic(run_dir / "table.json", result.table.to_dict())
    steps.mark("split_table")


def summary_lines(result: DemoResult) -> list[str]:
    """The short human summary printed at the end of ``guardrepro demo``."""
    lines: list[str] = []
    stats = result.stats
    lines.append("strict accuracy by variant (transformers fp32; invalid rows fail closed):")
    for variant, block in (stats.variants if stats else {}).items():
        lines.append(
            f"  {variant:<18} accuracy {frac_equals(block.accuracy)}   "
            f"coverage {frac_equals(block.coverage)}"
        )
    lines.append("strict flips by edit (view all_pairs: fail-closed; 95% cluster bootstrap, "
                 "unstratified):")
    for variant, edit in (stats.edits if stats else {}).items():
        flip = edit.views["all_pairs"].flip_rate
        ci = "" if flip.lower is None else f"  [{flip.lower:.3f}, {flip.upper:.3f}]"
        lines.append(f"  {variant:<18} {frac_equals(flip)}{ci}")
    if result.comparison is not None:
        s = result.comparison.summary()
        plan = result.mlx_plan
        where = "" if plan is None else (
            f" ({Path(plan.recipe).stem}, {plan.rows} rows, {plan.device})")
        lines.append(f"transformers fp32 vs MLX Q8 g64{where}:")
        lines.append(f"  identical tokens   {frac_equals(s.identical_tokens)}"
                     "  (token identity)")
        lines.append(f"  strict agreement   {frac_equals(s.strict_agreement)}"
                     "  (gate rule)")
        lines.append(f"  exact-score agree  {frac_equals(s.exact_score_agreement)}")
    if result.gate is not None:
        lines.append(f"gate: {result.gate.verdict}")
    if result.table is not None:
        lines.append(f"ToolSafe table, rule guard on all {result.table.split_rows} rows of "
                     "the toy ASB split (strict):")
        for e in result.table.rows:
            values = {name: e.value(name) for name in ("accuracy", "f1", "recall")}
            figs = "  ".join(f"{name} {v:.4f}" for name, v in values.items() if v is not None)
            lines.append(f"  {e.view:<12} kept {e.kept}/{e.rows}  {figs}")
    lines.append(f"timings (s): {json.dumps(result.seconds)}")
    lines.append(f"demo directory: {result.out_dir}")
    if result.attribution_table is not None:
        lines.append("attribution against the shipped reference:")
        lines.extend(f"  {line}" for line in result.attribution_table.splitlines())
    if result.report is not None:
        lines.append(f"report: {result.report}")
    if result.html is not None:
        lines.append(f"html report: {result.html}")
    return lines


def raise_if_gate_failed(result: DemoResult) -> None:
    if result.gate is not None and not result.gate_passed:
        raise GateFailed(result.gate.verdict)
