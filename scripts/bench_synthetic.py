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
does, in that many forked processes of one thread, each making the rows a run would give it,
continuous batching); ``--repeats R`` (default 3: rounds of the hf
configurations, interleaved); ``--concurrency 16,44,64`` (with ``hf-generate``: the
lean decoder again at each concurrency, every row's tokens compared with the
naive loop's: ``check-invariance`` on this cohort); ``--vllm-options`` (a run profile whose
``[backend_options]`` vLLM gets, e.g. ``runners/vllm-bf16.toml``);
``--json OUT``.

The hf configurations time what a user waits for: the shape's seeded random
model is saved once as a checkpoint (safetensors), and each round runs
``hf-generate`` then ``hf-lean``, each a fresh process
(``scripts/synthetic/hf_process.py``) that loads it as a run of it would:
the naive loop through the hf runner's ``from_pretrained``, the lean workers
reading the tensors themselves after the fork (no transformers model built).
``load_s`` is that process's start-up (interpreter, imports, load, fork: process
start to generation start), ``wall_s`` its start to exit. The ratios are paired
per round (naive / lean in the same round) and summarised by their median and
worst round; every round's tokens are compared with the first naive round's.

Output: the achieved length profile beside the published target
(``scripts/synthetic/cohort.py``), then one line per backend: wall split
(load, prefill, decode), the generation ratio to the naive loop measured in
this run, prompt and generated tokens per second, peak memory, the share of
prompt tokens reused, rows with exactly their forced length, and rows
token-identical to that backend's batch-1 reference (hf: ``generate`` per
row on every row; MLX and vLLM: their own batch 1 on ``--sample`` rows; MLX's ratio is
batched with reuse against batch 1 on those rows).
``--json`` writes one document: shape, profile, every backend's report (the hf
ones of the first round), ``hf_rounds`` (every round's hf reports) and
``hf_summary`` (the paired ratios).

Random weights make the identity counts a real test of batching and prefix
reuse: nothing in the weights favours one token. Output lengths are forced
(``run_hf``): the EOS ids are suppressed until the row's length, then forced.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
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
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=_sizes, default=[])
    parser.add_argument("--vllm-python", type=Path)
    parser.add_argument("--vllm-options", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plan", action="store_true",
                        help="build the shape's config and the cohort, print the plan, run nothing")
    args = parser.parse_args(argv)
    if args.rows < 4 or args.rows % 4 or args.rows > cohort.MAX_ROWS:
        parser.error(f"--rows must be a multiple of 4 from 4 to {cohort.MAX_ROWS}")
    if args.sample < 0 or args.batch < 1 or args.workers < 1 or args.repeats < 1:
        parser.error("--sample must be >= 0, --batch, --workers and --repeats >= 1")
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


def save_checkpoint(shape: Shape, directory: Path) -> Path:
    """The shape's randomly initialised model (seeded: ``shapes.build_hf``) saved as a
    checkpoint directory (``config.json`` and safetensors), read by every hf process."""
    from scripts.synthetic.shapes import build_hf

    build_hf(shape).save_pretrained(str(directory), safe_serialization=True)
    return directory


def run_fresh(backend: str, checkpoint: Path, shape: Shape, rows: list[cohort.Row],
              args: argparse.Namespace, work: Path) -> Result:
    """``backend`` (hf-generate or hf-lean) in a fresh process
    (``scripts.synthetic.hf_process``): wall = process start to exit, timed here."""
    spec = {"backend": backend, "checkpoint": str(checkpoint), "slots": args.batch,
            "workers": args.workers,
            "shape": {"name": shape.name, "config": shape.config, "eos_ids": shape.eos_ids},
            "rows": [{"row_id": r.row_id, "base": r.base, "variant": r.variant,
                      "prompt": list(r.prompt), "output_tokens": r.output_tokens}
                     for r in rows]}
    spec_path, out_path = work / f"{backend}-spec.json", work / f"{backend}-out.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "scripts.synthetic.hf_process", str(spec_path),
                           str(out_path)], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"{backend} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    got = json.loads(out_path.read_text())
    first = float(got["generation_epochs"][0])
    return Result(backend, got["what"] + "; fresh process", rows,
                  {k: list(v) for k, v in got["tokens"].items()}, first - started,
                  got["prefill_s"], got["decode_s"], got["reused"], got["peak_memory_bytes"],
                  got["memory_kind"], shape.eos_ids[0], {"wall_s": round(wall, 3)})


def paired_summary(rounds: list[list[dict[str, Any]]]) -> dict[str, Any] | None:
    """hf-lean against hf-generate, round by round: the median (and worst) of the
    per-round ratios of generation and of wall time, and whether every round's
    tokens were identical to the naive loop's."""
    pairs = []
    for reports in rounds:
        by = {r["backend"]: r for r in reports}
        if "hf-generate" in by and "hf-lean" in by:
            naive, lean = by["hf-generate"], by["hf-lean"]
            pairs.append((naive["generation_s"] / lean["generation_s"],
                          naive["wall_s"] / lean["wall_s"],
                          lean["identical"]["rows"] == lean["identical"]["of"]))
    if not pairs:
        return None
    gen = [p[0] for p in pairs]
    wall = [p[1] for p in pairs]
    identical = all(p[2] for p in pairs)
    line = (f"hf-lean vs hf-generate over {len(pairs)} round(s): generation "
            f"{statistics.median(gen):.2f}x median (worst {min(gen):.2f}x), wall "
            f"{statistics.median(wall):.2f}x median (worst {min(wall):.2f}x); rounds: "
            + ", ".join(f"{g:.2f}x / {w:.2f}x" for g, w, _ in pairs)
            + f"; tokens identical in every round: {'yes' if identical else 'NO'}")
    return {"generation_ratios": gen, "wall_ratios": wall,
            "generation_median": statistics.median(gen), "wall_median": statistics.median(wall),
            "identical_every_round": identical, "line": line}


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
    hf = [b for b in BACKENDS if b.startswith("hf-") and b in args.backends]  # naive first
    rounds: list[list[dict[str, Any]]] = []
    if hf:
        from scripts.synthetic import run_hf

        with tempfile.TemporaryDirectory(prefix="bench-synthetic-hf-") as tmp:
            checkpoint = save_checkpoint(shape, Path(tmp) / "checkpoint")
            for k in range(args.repeats):
                this_round = []
                for backend in hf:
                    print(f"[bench] round {k + 1}/{args.repeats} {backend} ...", file=sys.stderr,
                          flush=True)
                    result = run_fresh(backend, checkpoint, shape, rows, args, Path(tmp))
                    if backend == "hf-generate" and reference is None:
                        reference = result.tokens
                        this_round.append(result.report())
                    else:
                        this_round.append(result.report(reference, "hf-generate (round 1)"))
                rounds.append(this_round)
            if args.concurrency and reference is not None:
                print("[bench] concurrency ...", file=sys.stderr, flush=True)
                model = run_hf.load_saved(checkpoint, args.threads)
                checks = run_hf.concurrency_check(model, rows, shape, args.concurrency,
                                                  reference)
                del model
        reports.extend(rounds[0])
        naive_s = next((r["generation_s"] for r in rounds[0] if r["backend"] == "hf-generate"),
                       None)
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
    for k, later in enumerate(rounds[1:], start=2):
        later_naive = next((r["generation_s"] for r in later if r["backend"] == "hf-generate"),
                           None)
        print(f"round {k}:\n{format_table(later, later_naive, len(rows))}")
    summary = paired_summary(rounds)
    if summary:
        print(summary["line"])
    for check in checks:
        print(f"concurrency {check['concurrency']} ({check['decoded_together']} rows decoded "
              f"together, lean decoder): {check['identical']}/{check['of']} rows identical "
              f"to generate at batch 1 ({check['seconds']:.1f} s)")
    print("hf-*: each a fresh process loading the saved checkpoint as a run does; load_s = "
          "process start to generation start (interpreter, imports, load, fork), gen_s = "
          "prefill + decode (workers: common start to last done), wall_s = process start to "
          "exit; vs naive = hf-generate's / the backend's in the same round")
    if args.json is not None:
        document = {"shape": {"name": shape.name, "parameters": shape.parameters(),
                              "config": shape.config}, "profile": profile,
                    "cpus": os.cpu_count(), "backends": reports,
                    "naive_generation_s": naive_s, "failure": failure,
                    "hf_rounds": rounds, "hf_summary": summary,
                    "concurrency": checks}
        atomic_write_bytes(args.json, (json.dumps(document, indent=2) + "\n").encode())
    if failure is not None:
        print(failure, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
