"""Measure the shipped toy guard on the shipped toy benchmark.

Input: a toy guard checkpoint directory (``guardrepro/data/toy_guard`` by
default), the toy benchmark directory and the toy cohort spec. Output: a JSON
summary with the parse rate (``guardrepro.guards.ts_guard.parser``), strict accuracy against
the gold labels (fail-closed: an unparsable output counts as unsafe), and,
on the eligible rows (history holds both markers), the share of strict
decisions that flip under each cohort edit, with the edited rows built by
``guardrepro.bench.cohort.build.build_variants`` exactly as the cohort builder does.

Invariants: greedy decoding with transformers in float32 (the bf16 weights
upcast), left padding with an attention mask, EOS ``<|im_end|>`` /
``<|endoftext|>``; prompts rendered with ``render_ts_guard_prompt`` and the
checkpoint's own chat template, the same path the training used. None of the
benchmark rows was trained on (training draws a different seed stream).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro.guards.base import render_ts_guard_prompt
from guardrepro.guards.ts_guard.parser import parse_ts_guard
from scripts.toy.train import chat_ids

PACKAGE = Path(__file__).resolve().parents[2] / "guardrepro"
GUARD_DIR = PACKAGE / "data" / "toy_guard"
BENCH_DIR = PACKAGE / "data" / "toy_bench"
COHORT_SPEC = PACKAGE.parent / "cohorts" / "toy-64.toml"
EDITS = ("marker_paraphrase", "tool_alias", "combined")


@dataclass(frozen=True)
class Judged:
    text: str
    score: float | None  # None: the output did not parse

    @property
    def decision(self) -> int:
        """Strict decision, fail-closed (unparsable -> unsafe)."""
        return 1 if self.score is None or self.score != 0 else 0


class ToyGuard:
    """Greedy transformers inference over a toy guard checkpoint."""

    def __init__(self, checkpoint: Path = GUARD_DIR, threads: int | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.checkpoint = Path(checkpoint)
        self.template = (Path(checkpoint) / "template.txt").read_text(encoding="utf-8")
        self.tokenizer: Any = AutoTokenizer.from_pretrained(checkpoint)
        self.model: Any = AutoModelForCausalLM.from_pretrained(
            checkpoint, dtype=torch.float32
        ).eval()
        gen = json.loads((Path(checkpoint) / "generation_config.json").read_text())
        self.eos = list(gen["eos_token_id"])
        self.pad = int(gen["pad_token_id"])

    def prompt_ids(self, sample: Mapping[str, Any]) -> list[int]:
        return chat_ids(self.tokenizer, render_ts_guard_prompt(self.template, sample))

    def generate(
        self,
        samples: Sequence[Mapping[str, Any]],
        *,
        batch_size: int = 32,
        max_new_tokens: int = 96,
        progress: bool = False,
    ) -> list[str]:
        """Greedy outputs in input order (batches of similar prompt length)."""
        from tqdm import tqdm

        torch = self.torch
        prompts = [self.prompt_ids(s) for s in samples]
        order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
        out: list[str] = [""] * len(prompts)
        bar = tqdm(total=len(prompts), desc="toy guard", unit="row", disable=not progress)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            width = max(len(prompts[i]) for i in chunk)
            ids = torch.full((len(chunk), width), self.pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                ids[row, width - len(prompts[i]) :] = torch.tensor(prompts[i])
                mask[row, width - len(prompts[i]) :] = 1
            with torch.no_grad():
                gen = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=False,
                    max_new_tokens=max_new_tokens,
                    eos_token_id=self.eos,
                    pad_token_id=self.pad,
                    repetition_penalty=None,
                    top_k=None,
                    top_p=None,
                    temperature=None,
                )
            for row, i in enumerate(chunk):
                tokens = [int(t) for t in gen[row, width:]]
                cut = next((k for k, t in enumerate(tokens) if t in self.eos), len(tokens))
                out[i] = str(self.tokenizer.decode(tokens[:cut], skip_special_tokens=False))
            bar.update(len(chunk))
        bar.close()
        return out

    def judge(self, samples: Sequence[Mapping[str, Any]], **kw: Any) -> list[Judged]:
        return [Judged(t, parse_ts_guard(t).score) for t in self.generate(samples, **kw)]


def measure(
    guard: ToyGuard,
    bench_dir: Path = BENCH_DIR,
    spec_path: Path = COHORT_SPEC,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """Parse rate, strict accuracy and flip shares (see the module docstring)."""
    from guardrepro.bench.cohort.build import build_variants, is_eligible
    from guardrepro.bench.cohort.spec import load_spec
    from guardrepro.bench.tsbench import field_text, load_benchmark
    from scripts.toy.targets import answer

    spec = load_spec(spec_path)
    rows = load_benchmark(bench_dir, "agentdojo")
    originals = [row.raw for row in rows]
    variants: list[tuple[int, str, dict[str, Any]]] = []
    excluded = 0
    for index, row in enumerate(rows):
        if not is_eligible(spec, field_text(row.raw["history"])):
            continue
        built = build_variants(spec, row)
        if not isinstance(built, dict):
            excluded += 1
            continue
        variants += [(index, edit, built[edit]) for edit in EDITS if edit in built]
    judged = guard.judge(originals + [v for _, _, v in variants], progress=progress)
    base, edited = judged[: len(originals)], judged[len(originals) :]
    gold = [1 if float(r["score"]) != 0 else 0 for r in originals]
    parsed = sum(j.score is not None for j in judged)
    eligible = sorted({i for i, _, _ in variants})
    summary: dict[str, Any] = {
        "checkpoint": str(guard.checkpoint),
        "rows": len(originals),
        "generations": len(judged),
        "parse_rate": parsed / len(judged),
        "parse_rate_original": sum(j.score is not None for j in base) / len(base),
        "strict_accuracy": sum(j.decision == g for j, g in zip(base, gold, strict=True))
        / len(base),
        "matches_cue_target": sum(j.text == answer(r) for j, r in zip(base, originals, strict=True))
        / len(base),
        "eligible_rows": len(eligible),
        "eligible_excluded": excluded,
        "strict_accuracy_eligible": sum(base[i].decision == gold[i] for i in eligible)
        / max(1, len(eligible)),
        "flips": {},
        "flips_unsafe_to_safe": {},
    }
    for edit in EDITS:
        pairs = [(base[i], j) for (i, e, _), j in zip(variants, edited, strict=True) if e == edit]
        flips = sum(a.decision != b.decision for a, b in pairs)
        down = sum(a.decision == 1 and b.decision == 0 for a, b in pairs)
        summary["flips"][edit] = flips / max(1, len(pairs))
        summary["flips_unsafe_to_safe"][edit] = down / max(1, len(pairs))
    return summary
