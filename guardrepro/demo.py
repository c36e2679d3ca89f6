"""The embedded default, end to end, with no network.

Input: nothing but the repository (the toy guard and toy benchmark ship in
the package, pinned by ``locks/toy-guard.toml`` and ``locks/toy-bench.toml``).
Output: a demo directory holding the toy cohort, a transformers run and (when
MLX is installed) an MLX Q8 group-64 run of the toy guard, their comparison,
and on the transformers run the parity gate against the shipped reference
run, ``stats.json`` and the report. Every step goes through the same public
functions as the CLI verbs; the demo only wires them together and prints a
short summary.
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import guardrepro
from guardrepro.errors import GateFailed, InputError

Say = Callable[[str], None]


def repo_root() -> Path:
    """The source checkout holding the spec folders (``runners/``, ``cohorts/`` ...)."""
    root = Path(guardrepro.__file__).resolve().parent.parent
    if not (root / "runners").is_dir() or not (root / "locks").is_dir():
        raise InputError(
            "the demo needs the spec folders of a source checkout (runners/, locks/, "
            f"cohorts/, checks/, quantize/) next to the package; not found under {root}"
        )
    return root


@dataclass
class DemoResult:
    out_dir: Path
    cohort: Path
    runs: dict[str, Path] = field(default_factory=dict)
    comparison: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    report: Path | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def gate_passed(self) -> bool:
        return bool(self.gate and self.gate["passed"])


def mlx_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("mlx", "mlx_lm"))


def run_demo(
    out_dir: str | Path,
    *,
    home: str | Path | None = None,
    with_mlx: bool | None = None,
    replicates: int = 2000,
    progress: bool = True,
    say: Say = print,
) -> DemoResult:
    """Run the whole pipeline on the embedded default into ``out_dir``.

    ``out_dir`` must not hold an earlier demo's records of another
    provenance (runs resume; a mismatch is refused). ``with_mlx=None``
    runs the MLX Q8 step when mlx and mlx-lm are importable.
    """
    from guardrepro.checks.gate import evaluate, load_spec, reference_rows
    from guardrepro.checks.runio import load_run, write_json_atomic
    from guardrepro.checks.stats import compute_stats
    from guardrepro.cohort import build_cohort_file
    from guardrepro.fetch import fetch_lock
    from guardrepro.pipeline import run_cohort
    from guardrepro.report import build_report
    from guardrepro.verify import verify_lock

    root = repo_root()
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    use_mlx = mlx_available() if with_mlx is None else with_mlx
    steps = 7 if use_mlx else 5
    step = iter(range(1, steps + 1))
    clock = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        result.seconds[name] = round(now - clock, 2)
        clock = now

    result = DemoResult(out_dir=out, cohort=out / "cohort.jsonl")

    say(f"[{next(step)}/{steps}] verify the pinned toy guard and toy benchmark")
    for lock in ("locks/toy-guard.toml", "locks/toy-bench.toml"):
        fetch_lock(root / lock, home, progress=False)
        verify_lock(root / lock, home).raise_for_status()
    mark("verify")

    say(f"[{next(step)}/{steps}] build the toy cohort (cohorts/toy-64.toml)")
    if not result.cohort.exists():
        manifest = build_cohort_file(root / "cohorts/toy-64.toml", None, result.cohort)
        say(f"      {manifest['rows']} rows, sha256 {manifest['sha256'][:16]}...; "
            f"matches the spec's pinned hash: {manifest['sha256_matches']}")
    mark("cohort")

    say(f"[{next(step)}/{steps}] run the toy guard with transformers (runners/toy-hf.toml)")
    hf_dir = out / "hf-fp32"
    run_cohort(root / "runners/toy-hf.toml", result.cohort, hf_dir, progress=progress, home=home)
    result.runs["hf-fp32"] = hf_dir
    mark("run_hf")

    if use_mlx:
        from guardrepro.compare import compare_runs
        from guardrepro.quantize import quantize
        from guardrepro.runners.profile import RunProfile

        say(f"[{next(step)}/{steps}] quantize the toy guard to MLX Q8 g64 (quantize/q8-g64.toml)")
        artifact = out / "artifacts" / "toy-guard-mlx-q8"
        lock = artifact.parent / f"{artifact.name}.lock.toml"
        if not lock.exists():
            q = quantize(root / "quantize/q8-g64.toml", root / "locks/toy-guard.toml",
                         artifact, home=Path(home) if home else None)
            say(f"      {len(q.quantized)} weights quantized; tree {q.tree_sha256[:16]}...")
        mark("quantize")

        say(f"[{next(step)}/{steps}] run the Q8 artifact with MLX and compare with transformers")
        profile = RunProfile.load(root / "runners/toy-mlx-q8.toml").with_checkpoint_lock(lock)
        mlx_dir = out / "mlx-q8"
        run_cohort(profile, result.cohort, mlx_dir, progress=progress, home=home)
        result.runs["mlx-q8"] = mlx_dir
        comparison = compare_runs(hf_dir, mlx_dir)
        result.comparison = comparison.to_dict()
        write_json_atomic(out / "compare-hf-fp32-vs-mlx-q8.json", result.comparison)
        mark("run_mlx")

    say(f"[{next(step)}/{steps}] parity gate against the shipped reference (checks/toy-guard.toml)")
    run = load_run(hf_dir)
    spec = load_spec(root / "checks/toy-guard.toml")
    key_field, reference, _ = reference_rows(spec, home)
    result.gate = evaluate(spec, run.rows, key_field=key_field, reference=reference)
    write_json_atomic(hf_dir / "gate.json", result.gate)
    mark("gate")

    say(f"[{next(step)}/{steps}] statistics and report")
    result.stats = compute_stats(run.rows, replicates=replicates, seed=260828,
                                 expected_source=run.expected_source)
    write_json_atomic(hf_dir / "stats.json", result.stats)
    result.report = build_report(hf_dir)
    mark("stats_report")
    return result


def _rate(figure: dict[str, Any] | None) -> str:
    if not figure:
        return "n/a"
    value = figure.get("value")
    shown = "n/a" if value is None else f"{value:.3f}"
    return f"{figure['numerator']}/{figure['denominator']} = {shown}"


def summary_lines(result: DemoResult) -> list[str]:
    """The short human summary printed at the end of ``guardrepro demo``."""
    lines: list[str] = []
    stats = result.stats or {}
    lines.append("strict accuracy by variant (transformers fp32; invalid rows fail closed):")
    for variant, block in stats.get("variants", {}).items():
        lines.append(
            f"  {variant:<18} accuracy {_rate(block['metrics']['accuracy'])}   "
            f"coverage {_rate(block['coverage'])}"
        )
    lines.append("strict flips by edit (all pairs, fail-closed; 95% stratified cluster bootstrap):")
    for variant, block in stats.get("edits", {}).items():
        view = block["views"]["all_pairs"]
        interval = view["intervals"]["flips"]["stratified"]
        ci = "" if not interval else f"  [{interval['low']:.3f}, {interval['high']:.3f}]"
        lines.append(f"  {variant:<18} {_rate(view['flips'])}{ci}")
    if result.comparison is not None:
        s = result.comparison["summary"]
        lines.append("transformers fp32 vs MLX Q8 g64:")
        lines.append(f"  identical tokens   {_rate(s['identical_tokens'])}")
        lines.append(f"  strict agreement   {_rate(s['strict_agreement'])}")
        lines.append(f"  exact-score agree  {_rate(s['exact_score_agreement'])}")
    if result.gate is not None:
        lines.append(f"gate: {result.gate['verdict']}")
    lines.append(f"timings (s): {json.dumps(result.seconds)}")
    lines.append(f"demo directory: {result.out_dir}")
    if result.report is not None:
        lines.append(f"report: {result.report}")
    return lines


def raise_if_gate_failed(result: DemoResult) -> None:
    if result.gate is not None and not result.gate_passed:
        raise GateFailed(result.gate["verdict"])
