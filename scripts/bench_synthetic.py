"""Benchmark every backend on a synthetic TS-Guard-shaped cohort: random weights, no download.

Input: ``--shape`` (``tiny``: a few million parameters, 32k context;
``qwen2.5-7b``: Qwen2.5-7B-Instruct's config, TS-Guard's shape) or
``--config`` JSON; ``--rows`` (multiple of 4, at most 256; default 32);
``--prompt-tokens N`` (every prompt N tokens: the long-prompt points);
``--backends`` (comma list of ``hf-generate``, ``hf-lean``, ``mlx``, ``vllm``;
default every one whose library this machine has: vLLM from ``--vllm-python``,
default ``.venv-vllm/bin/python`` of the main checkout or ``$VLLM_PYTHON``);
``--sample`` (the first rows, run at batch 1 by vLLM and the rows MLX runs both
at batch 1 and batched: MLX's CPU kernels are slow; default 8);
``--batch`` (default 16: MLX's batch, and the lean decoder's slots);
``--workers`` (default 2: the lean decoder runs as ``runners/toy-hf.toml``
does, in that many forked processes of one thread over the run's shards,
continuous batching); ``--concurrency 16,44,64`` (with ``hf-generate``: the
lean decoder again at each concurrency, every row's tokens compared with the
naive loop's: ``check-invariance`` on this cohort); ``--vllm-options`` (a run profile whose
``[backend_options]`` vLLM gets, e.g. ``runners/vllm-bf16.toml``);
``--json OUT``.

Output: the achieved length profile beside the published target
(``scripts/synthetic/cohort.py``), then one line per backend: wall split
(load, prefill, decode), the generation ratio to the naive loop measured in
this run, prompt and generated tokens per second, peak memory, the share of
prompt tokens reused, rows with exactly their forced length, and rows
token-identical to that backend's batch-1 reference (hf: ``generate`` per
row on every row; MLX and vLLM: their own batch 1 on ``--sample`` rows; MLX's ratio is
batched with reuse against batch 1 on those rows).
``--json`` writes one document: shape, profile, every backend's report.

Random weights make the identity counts a real test of batching and prefix
reuse: nothing in the weights favours one token. Output lengths are forced
(``run_hf``): the EOS ids are suppressed until the row's length, then forced.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guardrepro.artifacts.store import atomic_write_bytes  # noqa: E402
from scripts.synthetic import cohort  # noqa: E402
from scripts.synthetic.measure import Result, format_table  # noqa: E402
from scripts.synthetic.shapes import Shape, load_shape  # noqa: E402

BACKENDS = ("hf-generate", "hf-lean", "mlx", "vllm")
MAIN_VLLM = Path("/work/main/.venv-vllm/bin/python")


def vllm_python() -> Path | None:
    for candidate in (os.environ.get("VLLM_PYTHON"), ROOT / ".venv-vllm/bin/python", MAIN_VLLM):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def available(name: str, vllm_py: Path | None) -> bool:
    if name == "vllm":
        return vllm_py is not None
    if name == "mlx":
        try:
            import mlx.core  # noqa: F401
            import mlx_lm  # noqa: F401
        except ImportError:
            return False
    return True


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers: {text!r}") from exc
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1: {text!r}")
    return sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="tiny")
    parser.add_argument("--config", type=Path)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int)
    parser.add_argument("--backends")
    parser.add_argument("--sample", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=_sizes, default=[])
    parser.add_argument("--vllm-python", type=Path)
    parser.add_argument("--vllm-options", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plan", action="store_true",
                        help="build the shape's config and the cohort, print the plan, run nothing")
    args = parser.parse_args(argv)
    if args.rows < 4 or args.rows % 4 or args.rows > cohort.MAX_ROWS:
        parser.error(f"--rows must be a multiple of 4 from 4 to {cohort.MAX_ROWS}")
    if args.sample < 0 or args.batch < 1 or args.workers < 1:
        parser.error("--sample must be >= 0, --batch and --workers >= 1")
    args.vllm_py = args.vllm_python or vllm_python()
    if args.backends is None and args.plan:
        args.backends = ["vllm"] if args.vllm_options else list(BACKENDS)
    elif args.backends is None:
        args.backends = [b for b in BACKENDS if available(b, args.vllm_py)]
    else:
        args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
        unknown = [b for b in args.backends if b not in BACKENDS]
        if unknown:
            parser.error(f"unknown backend(s) {unknown}; choose from {', '.join(BACKENDS)}")
        missing = [b for b in args.backends if not available(b, args.vllm_py)]
        if missing and not args.plan:
            parser.error(f"not available on this machine: {', '.join(missing)}")
    return args


def vllm_options(path: Path | None, device: str) -> tuple[dict[str, Any], bool]:
    """Engine options: a profile's ``[backend_options]`` (vLLM's keys), else CPU defaults."""
    if path is None:
        # vLLM's CPU engine: float32, no compilation, a quarter of the memory (the
        # machine is shared), 2 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE, run_vllm)
        return {"dtype": "float32", "enable_prefix_caching": True, "max_num_seqs": 64,
                "max_num_batched_tokens": 16384, "max_model_len": 16384, "seed": 0,
                "enforce_eager": True, "gpu_memory_utilization": 0.25}, False
    from guardrepro.run.profile import RunProfile

    given = dict(RunProfile.load(path).backend_options)
    keep = ("dtype", "enable_prefix_caching", "max_num_seqs", "max_num_batched_tokens",
            "max_model_len", "gpu_memory_utilization", "seed", "enforce_eager")
    return {k: given[k] for k in keep if k in given}, bool(given.get("batch_invariant"))


def run_vllm(args: argparse.Namespace, shape: Shape, rows: list[cohort.Row],
             work: Path) -> Result:
    options, invariant = vllm_options(args.vllm_options, "cpu")
    config_dir = shape.write_config(work / f"config-{shape.name}")
    sample = [r.row_id for r in rows[: args.sample]]
    spec = {"config_dir": str(config_dir), "options": options, "batch_invariant": invariant,
            "sample": sample, "rows": [{"row_id": r.row_id, "prompt": list(r.prompt),
                                        "output_tokens": r.output_tokens} for r in rows]}
    spec_path, out_path = work / "vllm-spec.json", work / "vllm-out.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(args.vllm_py), "-m", "scripts.synthetic.run_vllm",
                           str(spec_path), str(out_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"vllm run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    got = json.loads(out_path.read_text())
    tokens = {k: list(v) for k, v in got["tokens"].items()}
    peak = got["cuda_peak_bytes"]
    result = Result("vllm", f"vLLM {got['vllm']} dummy weights, {options.get('dtype')}",
                    rows, tokens, got["load_s"], None, got["generation_s"],
                    got["cached_tokens"], peak if peak is not None else got["peak_rss_bytes"],
                    "CUDA max allocated" if peak is not None else "vLLM process peak RSS", None,
                    {"batch_invariant": invariant, "options": options})
    result.extra["batch1"] = got["batch1_tokens"]
    return result


def plan(args: argparse.Namespace, shape: Shape, rows: list[cohort.Row]) -> int:
    """``--plan``: what a run would do, with its inputs built and checked."""
    kv = shape.kv_bytes_per_token(2)
    longest = max(len(r.prompt) + r.output_tokens for r in rows)
    print(f"KV cache (bf16): {kv} bytes a token; longest row {longest} tokens = "
          f"{kv * longest / 2**30:.2f} GiB; all rows at once "
          f"{kv * sum(len(r.prompt) + r.output_tokens for r in rows) / 2**30:.1f} GiB")
    if shape.config["max_position_embeddings"] < longest:
        raise SystemExit(f"the shape's context {shape.config['max_position_embeddings']} "
                         f"is shorter than the longest row ({longest})")
    if "vllm" in args.backends:
        options, invariant = vllm_options(args.vllm_options, "cpu")
        if options.get("max_model_len", longest) < longest:
            raise SystemExit(f"max_model_len {options['max_model_len']} < longest row {longest}")
        with tempfile.TemporaryDirectory(prefix="bench-synthetic-plan-") as tmp:
            written = json.loads((shape.write_config(Path(tmp)) / "config.json").read_text())
        print(f"vLLM: load_format=dummy, config.json of {len(written)} keys, options {options}, "
              f"batch_invariant {invariant}; then rows 1-{min(args.sample, len(rows))} one "
              f"request at a time; python {args.vllm_py or '(none here)'}")
    others = [b for b in args.backends if b != "vllm"]
    if others:
        print(f"on this machine: {', '.join(others)} (batch {args.batch})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shape = load_shape(args.shape, args.config)
    rows = cohort.build(args.rows, shape.config["vocab_size"], shape.eos_ids,
                        prompt_tokens=args.prompt_tokens)
    profile = cohort.summary(rows)
    print(f"shape {shape.name}: {shape.parameters() / 1e6:.1f} M parameters, "
          f"{shape.config['num_hidden_layers']} layers, context "
          f"{shape.config['max_position_embeddings']}; backends {', '.join(args.backends)}; "
          f"{os.cpu_count()} CPUs", flush=True)
    print(cohort.format_summary(profile), flush=True)
    if args.plan:
        return plan(args, shape, rows)
    reports: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    failure: str | None = None
    naive_s = None
    reference: dict[str, list[int]] | None = None
    hf = [b for b in args.backends if b.startswith("hf-")]
    if hf:
        from scripts.synthetic import run_hf

        model, load_s = run_hf.load(shape, args.threads)
        if "hf-generate" in hf:
            print("[bench] hf-generate ...", file=sys.stderr, flush=True)
            naive = run_hf.naive(model, load_s, rows, shape)
            reference, naive_s = naive.tokens, (naive.prefill_s or 0.0) + naive.decode_s
            reports.append(naive.report())
        if "hf-lean" in hf:
            print("[bench] hf-lean ...", file=sys.stderr, flush=True)
            lean = run_hf.lean_workers(model, load_s, rows, shape, args.batch, args.workers)
            reports.append(lean.report(reference, "hf-generate" if reference else None))
        if args.concurrency and reference is not None:
            print("[bench] concurrency ...", file=sys.stderr, flush=True)
            checks = run_hf.concurrency_check(model, rows, shape, args.concurrency, reference)
        del model
    if "mlx" in args.backends:
        from scripts.synthetic import run_mlx

        model, load_s = run_mlx.load(shape)
        sample = rows[: args.sample]
        print("[bench] mlx batch 1 ...", file=sys.stderr, flush=True)
        single = run_mlx.run(model, load_s, sample, shape, 1, reuse=False)
        print("[bench] mlx batched ...", file=sys.stderr, flush=True)
        batched = run_mlx.run(model, load_s, sample, shape, args.batch, reuse=True)
        reports.append(single.report())
        reports.append(batched.report(single.tokens, single.backend))
    if "vllm" in args.backends:
        print("[bench] vllm ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="bench-synthetic-") as tmp:
            try:
                result = run_vllm(args, shape, rows, Path(tmp))
            except SystemExit as exc:  # the other backends' results are still reported
                failure = str(exc)
            else:
                batch1 = result.extra.pop("batch1")
                reports.append(result.report(batch1, "vllm batch 1"))
    print(format_table(reports, naive_s, len(rows)))
    for check in checks:
        print(f"concurrency {check['concurrency']} ({check['decoded_together']} rows decoded "
              f"together, lean decoder): {check['identical']}/{check['of']} rows identical "
              f"to generate at batch 1 ({check['seconds']:.1f} s)")
    print("gen_s = prefill + decode (several workers: first start to last done); wall_s = "
          "load + generation (workers: load + fork to exit); vs naive = hf-generate's / "
          "the backend's, both in this run")
    if args.json is not None:
        document = {"shape": {"name": shape.name, "parameters": shape.parameters(),
                              "config": shape.config}, "profile": profile,
                    "cpus": os.cpu_count(), "backends": reports,
                    "naive_generation_s": naive_s, "failure": failure,
                    "concurrency": checks}
        atomic_write_bytes(args.json, (json.dumps(document, indent=2) + "\n").encode())
    if failure is not None:
        print(failure, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
