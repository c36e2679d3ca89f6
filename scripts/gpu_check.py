"""GPU validation of the vLLM runner (driven by scripts/gpu_check.sh).

Input: a checkpoint directory (default: the shipped toy guard
``guardrepro/data/toy_guard``; when it is not shipped yet, a tiny random
Qwen2 built locally: no downloads either way), prompts rendered from the
shipped toy benchmark rows with the toy guard template.

``run --config NAME --out FILE``: one configuration per process (vLLM's
batch-invariant switch is process-wide): loads the runner, runs every prompt
greedily in one batched call (twice, prefix cache reset in between) and one
request per call, and writes the token ids, finish reasons and what the
runner describes.

``summarize --dir DIR --out FILE``: compares the configurations: repeat
agreement, batch 1 vs batched, and each vLLM configuration against the
transformers runner of the same dtype; writes the JSON summary.

``cohort --run RUN_DIR --invariance FILE --wall-s S --into FILE``: the
TS-Guard cohort stage: from the run's records (rows, generated tokens, the
generation time = the records' summed ``timings.total_s``) and the
``check-invariance`` report (batch 1 vs batched identical rows), adds a
``cohort`` entry to the summary JSON and prints it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name -> (backend, backend options)
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "hf-fp32": ("hf", {"dtype": "float32", "device": "cuda", "batch_size": 8}),
    "hf-bf16": ("hf", {"dtype": "bfloat16", "device": "cuda", "batch_size": 8}),
    "vllm-fp32": ("vllm", {"dtype": "float32", "batch_invariant": False}),
    "vllm-bf16": ("vllm", {"dtype": "bfloat16", "batch_invariant": False}),
    "vllm-bf16-invariant": ("vllm", {"dtype": "bfloat16", "batch_invariant": True}),
}
VLLM_COMMON = {"enforce_eager": True, "max_model_len": 4096, "max_num_seqs": 64,
               "batch_size": 64, "gpu_memory_utilization": 0.3, "enable_prefix_caching": True}
ROWS_PER_DOMAIN = 8


def checkpoint_dir(work: Path) -> tuple[Path, str]:
    shipped = ROOT / "guardrepro" / "data" / "toy_guard"
    if (shipped / "config.json").is_file() and list(shipped.glob("*.safetensors")):
        return shipped, "shipped toy guard"
    target = work / "tiny-random-qwen2"
    if not (target / "config.json").is_file():
        import torch
        from safetensors.torch import load_file, save_file

        from scripts.toy.tiny import build_tiny_qwen2

        build_tiny_qwen2(target)
        weights = target / "model.safetensors"
        tensors = load_file(str(weights))
        generator = torch.Generator().manual_seed(1234)
        redrawn = {name: (torch.randn(t.shape, generator=generator) * 0.1 if t.dim() == 2 else t)
                   for name, t in sorted(tensors.items())}
        save_file({k: v.contiguous() for k, v in redrawn.items()}, str(weights),
                  metadata={"format": "pt"})
    return target, "tiny random Qwen2 (toy guard weights not shipped)"


def prompts() -> list[tuple[str, str]]:
    from guardrepro.guards.base import render_ts_guard_prompt

    template = (ROOT / "guardrepro" / "data" / "toy_guard" / "template.txt").read_text()
    bench = ROOT / "guardrepro" / "data" / "toy_bench" / "TS-Bench" / "agentdojo-traj"
    out = []
    for domain in ("banking", "slack", "travel", "workspace"):
        rows = json.loads((bench / f"{domain}.json").read_text())
        for index, row in enumerate(rows[:ROWS_PER_DOMAIN]):
            out.append((f"{domain}-{index}", render_ts_guard_prompt(template, row)))
    return out


def run_config(name: str, out: Path, work: Path, max_new_tokens: int, allow_cpu: bool) -> None:
    from guardrepro.decoding import DecodingParams
    from guardrepro.run.prompts import PromptTokenizer
    from guardrepro.run.runners.base import GenerationRequest
    from guardrepro.run.runners.registry import backend_of, create_runner

    backend, options = CONFIGS[name]
    options = dict(options)
    if backend == "vllm":
        options.update(VLLM_COMMON)
    if allow_cpu:  # a dry run of this script on a machine without CUDA
        options.pop("gpu_memory_utilization", None)
        options["device"] = "cpu"
    ckpt, kind = checkpoint_dir(work)
    tok = PromptTokenizer(ckpt)
    items = prompts()
    requests = [GenerationRequest(row_id, tok.encode_chat(text)) for row_id, text in items]
    started = time.perf_counter()
    runner = create_runner(backend_of(backend), ckpt, options, eos_token_ids=tok.eos_token_ids,
                           pad_token_id=tok.pad_token_id, decode=tok.decode)
    load_s = time.perf_counter() - started
    params = DecodingParams(max_new_tokens=max_new_tokens)

    def reset() -> None:
        getattr(runner, "reset_prefix_cache", lambda: None)()

    try:
        t0 = time.perf_counter()
        batched_a = runner.generate(requests, params)
        t1 = time.perf_counter()
        reset()
        batched_b = runner.generate(requests, params)
        reset()
        t2 = time.perf_counter()
        alone = [runner.generate([r], params)[0] for r in requests]
        t3 = time.perf_counter()
        described = dict(runner.describe())
    finally:
        runner.close()

    def pack(gens: list[Any]) -> list[dict[str, Any]]:
        return [{"row_id": g.row_id, "token_ids": list(g.token_ids),
                 "finish_reason": g.finish_reason} for g in gens]

    result = {
        "config": name, "backend": backend, "options": options, "checkpoint": kind,
        "describe": described, "prompt_ids": [list(r.prompt_token_ids) for r in requests],
        "max_new_tokens": max_new_tokens, "load_s": load_s,
        "seconds": {"batched": t1 - t0, "batched_repeat": t2 - t1, "batch1": t3 - t2},
        "batched_a": pack(batched_a), "batched_b": pack(batched_b), "batch1": pack(alone),
    }
    out.write_text(json.dumps(result))


def agreement(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Identical sequences, first divergence per differing row, common-prefix share."""
    same = 0
    prefix_total = longest_total = 0
    diverging = {}
    for x, y in zip(a, b, strict=True):
        s, t = x["token_ids"], y["token_ids"]
        k = 0
        while k < min(len(s), len(t)) and s[k] == t[k]:
            k += 1
        prefix_total += k
        longest_total += max(len(s), len(t))
        if s == t and x["finish_reason"] == y["finish_reason"]:
            same += 1
        else:
            diverging[x["row_id"]] = k
    return {"rows": len(a), "identical": same,
            "token_agreement": prefix_total / longest_total if longest_total else 1.0,
            "first_divergence": diverging}


def summarize(directory: Path, out: Path) -> dict[str, Any]:
    results = {}
    for path in sorted(directory.glob("config-*.json")):
        data = json.loads(path.read_text())
        results[data["config"]] = data
    summary: dict[str, Any] = {"python": platform.python_version(), "configs": {},
                               "versions": {}, "device": {}}
    for data in results.values():
        described = data["describe"]
        for key in ("vllm_distribution", "vllm_version", "torch_version", "torch",
                    "transformers"):
            if key in described:
                summary["versions"][key] = described[key]
        for key in ("device", "device_name", "compute_capability"):
            if described.get(key) is not None:
                summary["device"][key] = described[key]
    for name, data in results.items():
        entry = {
            "describe": data["describe"], "checkpoint": data["checkpoint"],
            "load_s": round(data["load_s"], 2),
            "seconds": {k: round(v, 3) for k, v in data["seconds"].items()},
            "repeat": agreement(data["batched_a"], data["batched_b"]),
            "batch1_vs_batched": agreement(data["batch1"], data["batched_a"]),
            "finish_reasons": sorted({g["finish_reason"] for g in data["batched_a"]}),
            "mean_tokens": sum(len(g["token_ids"]) for g in data["batched_a"])
            / max(1, len(data["batched_a"])),
        }
        dtype = data["options"]["dtype"]
        reference = {"float32": "hf-fp32", "bfloat16": "hf-bf16"}.get(dtype)
        if data["backend"] == "vllm" and reference is not None and reference in results:
            ref = results[reference]
            entry["vs_" + reference + "_batch1"] = agreement(data["batch1"], ref["batch1"])
            entry["prompt_ids_identical_to_" + reference] = data["prompt_ids"] == ref["prompt_ids"]
        summary["configs"][name] = entry
    out.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def cohort_stage(run_dir: Path, invariance: Path | None, wall_s: float) -> dict[str, Any]:
    """Wall time, tokens/s and batch-1 agreement of the TS-Guard cohort run."""
    from guardrepro.guards.registry import record_parser
    from guardrepro.rundir.manifest import read_manifest
    from guardrepro.rundir.records import read_records

    records = read_records(run_dir, parsers=record_parser)
    manifest = read_manifest(run_dir)
    tokens = sum(len(a.token_ids) for r in records for a in r.attempts)
    gen_s = sum(r.timings.total_s for r in records)
    entry: dict[str, Any] = {
        "run_dir": str(run_dir), "rows": len(records), "generated_tokens": tokens,
        "prompt_tokens": sum(r.prompt_tokens for r in records),
        "wall_s": round(wall_s, 2), "generation_s": round(gen_s, 2),
        "tokens_per_s": round(tokens / gen_s, 1) if gen_s else None,
        "statuses": {s: sum(1 for r in records if r.status == s)
                     for s in sorted({r.status for r in records})},
        "backend_config": dict(manifest.provenance.backend_config) if manifest else None,
    }
    if invariance is not None and invariance.is_file():
        report = json.loads(invariance.read_text())
        entry["batch1_vs_batched"] = {
            "rows": len(report["rows"]), "identical": report["identical_sequences"],
            "token_agreement": report["token_agreement"], "batch_size": report["batch_size"],
            "seconds_batch1": report["seconds_batch1"],
            "seconds_batched": report["seconds_batched"]}
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)
    run = sub.add_parser("run")
    run.add_argument("--config", choices=sorted(CONFIGS), required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--work", type=Path, required=True)
    run.add_argument("--max-new-tokens", type=int, default=256)
    run.add_argument("--allow-cpu", action="store_true")
    summ = sub.add_parser("summarize")
    summ.add_argument("--dir", type=Path, required=True)
    summ.add_argument("--out", type=Path, required=True)
    coh = sub.add_parser("cohort")
    coh.add_argument("--run", type=Path, required=True)
    coh.add_argument("--invariance", type=Path)
    coh.add_argument("--wall-s", type=float, required=True)
    coh.add_argument("--into", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.verb == "cohort":
        entry = cohort_stage(args.run, args.invariance, args.wall_s)
        data = json.loads(args.into.read_text()) if args.into.is_file() else {}
        data["cohort"] = entry
        args.into.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        b = entry.get("batch1_vs_batched")
        same = f"{b['identical']}/{b['rows']}" if b else "not measured"
        print(f"cohort: {entry['rows']} rows, wall {entry['wall_s']} s (generation "
              f"{entry['generation_s']} s), {entry['generated_tokens']} tokens, "
              f"{entry['tokens_per_s']} tokens/s; batch 1 vs batched identical {same}")
    elif args.verb == "run":
        run_config(args.config, args.out, args.work, args.max_new_tokens, args.allow_cpu)
    else:
        summary = summarize(args.dir, args.out)
        for name, entry in summary["configs"].items():
            b = entry["batch1_vs_batched"]
            print(f"{name}: repeat {entry['repeat']['identical']}/{entry['repeat']['rows']}, "
                  f"batch1 vs batched {b['identical']}/{b['rows']} "
                  f"(token agreement {b['token_agreement']:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
