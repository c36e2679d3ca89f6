"""What recording P(unsafe) costs: generation with and without the label logits.

Used by ``scripts/bench_runners.py --label-cost``. Input: the toy cohort's
first rows, the toy guard, a backend (transformers lean batches of 64 and
``generate`` at batch 1; MLX when an artifact directory is given).
Output: per backend and round, the seconds of ``attempts.generate_chunk``
over the rows with the decision labels' ids requested (each step's label
logits gathered, ``label_probs``/``p_unsafe`` computed) and without (the
same rows with no label ids: nothing gathered, nothing computed), the two
interleaved and alternated in order each round, and the cost ratio
(with - without) / without; the median over rounds is the figure.

Invariant checked: both give the same tokens on every row (recording reads
logits, it never changes a choice).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

from guardrepro.decoding import DecodingParams
from guardrepro.guards.base import GuardTemplate
from guardrepro.guards.registry import get_guard
from guardrepro.run.attempts import generate_chunk
from guardrepro.run.pipeline import prepare_rows
from guardrepro.run.prompts import PromptTokenizer
from guardrepro.run.runners.registry import backend_of, create_runner
from guardrepro.rundir.cohort import read_cohort

TOY = Path(__file__).resolve().parents[1] / "guardrepro" / "data" / "toy_guard"
BACKENDS: dict[str, tuple[str, dict[str, Any]]] = {
    "hf-lean-b64": ("hf", {"decode_loop": "lean", "batch_size": 64, "threads": 1}),
    "hf-generate-b1": ("hf", {"decode_loop": "generate", "batch_size": 1, "threads": 1}),
    "mlx-q8": ("mlx", {"device": "cpu"}),
}


def _timed(runner: Any, guard: Any, rows: list[Any], tok: PromptTokenizer) -> tuple[float, Any]:
    params = DecodingParams(max_new_tokens=guard.max_new_tokens)
    start = time.perf_counter()
    history = generate_chunk(runner, guard, rows, params, tok.decode)
    return time.perf_counter() - start, {k: v[-1][0].token_ids for k, v in history.items()}


def label_cost(cohort: Path, rows: int, repeats: int, *,
               mlx_artifact: Path | None = None) -> list[dict[str, Any]]:
    """One result per backend (module docstring)."""
    tok = PromptTokenizer(TOY, pinned=True)
    template = (TOY / "template.txt").read_text(encoding="utf-8")
    guard = get_guard("toy-guard", GuardTemplate(template, "0" * 64))
    cohort_rows = read_cohort(cohort)[:rows]
    scored = prepare_rows(guard, tok, cohort_rows, guard.max_new_tokens)
    plain = [dataclasses.replace(p, label_tokens=(), label_token_ids=()) for p in scored]
    out = []
    for name, (backend, options) in BACKENDS.items():
        directory = TOY if backend == "hf" else mlx_artifact
        if directory is None:
            continue
        n = len(scored) if backend == "hf" else min(len(scored), 4)
        runner = create_runner(backend_of(backend), directory, dict(options),
                               eos_token_ids=tok.eos_token_ids, pad_token_id=tok.pad_token_id,
                               decode=tok.decode)
        _timed(runner, guard, plain[:1], tok)  # warm-up
        ratios, times = [], []
        for r in range(repeats):
            order = [("without", plain[:n]), ("with", scored[:n])]
            got = {}
            for label, subset in (order if r % 2 == 0 else order[::-1]):
                got[label] = _timed(runner, guard, subset, tok)
            if got["with"][1] != got["without"][1]:
                raise SystemExit(f"{name}: recording the labels changed the tokens")
            ratios.append((got["with"][0] - got["without"][0]) / got["without"][0])
            times.append((got["without"][0], got["with"][0]))
        runner.close()
        out.append({"backend": name, "rows": n, "rounds": repeats,
                    "cost_ratio_median": statistics.median(ratios), "cost_ratios": ratios,
                    "seconds_without_with": times})
    return out


def format_cost(results: list[dict[str, Any]]) -> str:
    lines = ["P(unsafe) recording cost = (generation with label logits - without) / without, "
             "interleaved rounds, median (and every round)"]
    for r in results:
        rounds = ", ".join(f"{x:+.1%}" for x in r["cost_ratios"])
        secs = statistics.median(w for _, w in r["seconds_without_with"])
        lines.append(f"{r['backend']:<16} {r['rows']:>3} rows  median {r['cost_ratio_median']:+.1%}"
                     f"  rounds [{rounds}]  (with labels: {secs:.2f} s per round)")
    return "\n".join(lines)
