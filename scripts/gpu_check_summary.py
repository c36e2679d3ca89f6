"""The inputs and the one summary of ``scripts/gpu_check.sh``.

``--check-inputs OUT_DIR``: loads the GPU toy profile the script wrote
(``OUT_DIR/toy-vllm-gpu.toml``) and the gate spec, fetches the shipped toy
locks into ``$GUARDREPRO_HOME`` (embedded: no network) and builds the toy
cohort into ``OUT_DIR/toy-cohort.jsonl``; exit 2 naming what is wrong.

``OUT_DIR [FAILED_STAGE ...]``: reads ``synthetic.json`` (bench_synthetic),
``stages.jsonl`` (each stage's wall time and exit code), the toy run's
records and ``toy-gate/gate.json``; prints one summary (cohort generation
seconds, end to end, tokens/s, memory, identity counts, the gate) and writes
it to ``OUT_DIR/gpu_check.json``. Exit 0 only when every stage passed and the
gate passed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def check_inputs(out: Path) -> int:
    from guardrepro.artifacts.fetch import fetch_lock
    from guardrepro.bench.cohort.build import build_cohort_file
    from guardrepro.checks.parity.gate import load_spec
    from guardrepro.errors import GuardreproError
    from guardrepro.run.profile import RunProfile

    try:
        profile = RunProfile.load(out / "toy-vllm-gpu.toml")
        load_spec(ROOT / "checks/toy-guard.toml")
        import os

        home = Path(os.environ.get("GUARDREPRO_HOME", out / "home"))
        for lock in ("locks/toy-bench.toml", "locks/toy-guard.toml"):
            fetch_lock(ROOT / lock, home, progress=False)
        cohort = out / "toy-cohort.jsonl"
        if not cohort.exists():
            build_cohort_file(ROOT / "cohorts/toy-64.toml", None, cohort)
        rows = sum(1 for _ in cohort.open())
    except (GuardreproError, OSError) as exc:
        print(f"inputs: {exc}")
        return 2
    options = profile.backend_options
    print(f"inputs: toy GPU profile {profile.name} (device {options.get('device')}, batches of "
          f"{options.get('batch_size')}), gate spec checks/toy-guard.toml, toy cohort {rows} rows")
    return 0


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def summarize(out: Path, failed: list[str]) -> int:
    from guardrepro.guards.registry import record_parser
    from guardrepro.rundir.records import read_records

    stages = {}
    for line in (out / "stages.jsonl").read_text().splitlines() if (out / "stages.jsonl").exists() \
            else []:
        entry = json.loads(line)
        stages[entry["stage"]] = entry
    summary: dict[str, Any] = {"stages": stages, "failed": failed}
    lines = []
    synthetic = _read(out / "synthetic.json")
    if synthetic:
        v = next((b for b in synthetic["backends"] if b["backend"] == "vllm"), None)
        if v:
            ident = v.get("identical") or {}
            end_to_end = stages.get("synthetic", {}).get("wall_s")
            summary["synthetic"] = {**v, "end_to_end_s": end_to_end}
            lines.append(
                f"synthetic qwen2.5-7b ({v['rows']} rows, {v['prompt_tokens']} prompt + "
                f"{v['generated_tokens']} generated tokens): generation {v['generation_s']:.1f} s, "
                f"end to end {end_to_end} s (load {v['load_s']:.1f} s), "
                f"{v['generated_tokens_per_s']} generated tokens/s, "
                f"peak {v['peak_memory_bytes'] / 2**30:.1f} GiB ({v['memory_kind']}), "
                f"prefix cache {100 * v['reuse_fraction']:.1f}% of prompt tokens, "
                f"batch 1 vs batched identical {ident.get('rows')}/{ident.get('of')}, "
                f"forced lengths {v['forced_lengths_ok']}/{v['rows']}")
    run_dir = out / "toy-run"
    if (run_dir / "records.jsonl").exists():
        records = list(read_records(run_dir, parsers=record_parser))
        tokens = sum(len(r.output_token_ids) for r in records)
        wall = stages.get("toy-run", {}).get("wall_s")
        summary["toy_run"] = {"rows": len(records), "generated_tokens": tokens, "wall_s": wall}
        lines.append(f"toy guard vLLM run: {len(records)} rows, {tokens} tokens, wall {wall} s")
    gate = _read(out / "toy-gate" / "gate.json")
    if gate is not None:
        summary["toy_gate"] = gate
        lines.append(f"toy gate: {gate.get('verdict', gate.get('passed'))}")
    passed = bool(gate and gate.get("passed")) and not failed and "synthetic" in summary
    summary["status"] = "ok" if passed else "failed"
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    print("\n".join(lines) or "no stage produced a result")
    if failed:
        print(f"failed: {' '.join(failed)}")
    print(f"status: {summary['status']} (JSON: {out / 'gpu_check.json'})")
    return 0 if passed else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check-inputs"] and len(argv) == 2:
        return check_inputs(Path(argv[1]))
    if len(argv) >= 1 and not argv[0].startswith("-"):
        return summarize(Path(argv[0]), argv[1:])
    print("usage: gpu_check_summary.py --check-inputs OUT_DIR | OUT_DIR [FAILED ...]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
