"""What every synthetic-benchmark backend reports, computed one way.

Input: the rows run, each row's generated ids, the wall split. Output: a
``Result`` whose ``report()`` is the JSON object for that backend: wall time
split into load, prefill and decode; prompt and generated tokens per second;
peak memory (and what was measured); the fraction of prompt tokens reused;
how many rows have exactly their forced length (ending in the forced EOS id)
and, when a batch-1 reference is given, how many rows are token-identical.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scripts.synthetic.cohort import Row


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@dataclass
class Result:
    backend: str
    what: str
    rows: Sequence[Row]
    tokens: dict[str, list[int]]
    load_s: float
    prefill_s: float | None  # None: the backend reports no split (vLLM's generate)
    decode_s: float
    reused: int  # prompt tokens taken from a cache rather than computed
    peak_memory_bytes: int
    memory_kind: str
    forced_eos: int | None  # the id every row's output must end with
    extra: dict[str, Any] = field(default_factory=dict)

    def forced_ok(self) -> int:
        return sum(1 for r in self.rows
                   if len(self.tokens[r.row_id]) == r.output_tokens
                   and (self.forced_eos is None or self.tokens[r.row_id][-1] == self.forced_eos))

    def identical(self, reference: Mapping[str, Sequence[int]]) -> tuple[int, int]:
        common = [r.row_id for r in self.rows if r.row_id in reference]
        same = sum(1 for row in common if list(reference[row]) == self.tokens[row])
        return same, len(common)

    def report(self, reference: Mapping[str, Sequence[int]] | None = None,
               reference_name: str | None = None) -> dict[str, Any]:
        prompt = sum(len(r.prompt) for r in self.rows)
        generated = sum(len(self.tokens[r.row_id]) for r in self.rows)
        run_s = (self.prefill_s or 0.0) + self.decode_s
        out: dict[str, Any] = {
            "backend": self.backend, "what": self.what, "rows": len(self.rows),
            "load_s": round(self.load_s, 3),
            "prefill_s": None if self.prefill_s is None else round(self.prefill_s, 3),
            "decode_s": None if self.prefill_s is None else round(self.decode_s, 3),
            "generation_s": round(run_s, 3),
            "wall_s": round(self.load_s + run_s, 3),
            "prompt_tokens": prompt, "generated_tokens": generated,
            "prompt_tokens_per_s": round(prompt / self.prefill_s, 1) if self.prefill_s else None,
            "generated_tokens_per_s": round(generated / (self.decode_s if self.prefill_s is not None
                                                       else run_s), 1) if run_s else None,
            "peak_memory_bytes": self.peak_memory_bytes, "memory_kind": self.memory_kind,
            "reused_prompt_tokens": self.reused,
            "reuse_fraction": round(self.reused / prompt, 4) if prompt else 0.0,
            "forced_lengths_ok": self.forced_ok(),
        }
        if reference is not None:
            same, compared = self.identical(reference)
            out["identical"] = {"vs": reference_name, "rows": same, "of": compared}
        out.update(self.extra)
        return out


def format_table(reports: Sequence[Mapping[str, Any]], naive_s: float | None,
                 naive_rows: int | None = None) -> str:
    """One line per backend; ``vs naive`` only for backends that ran the naive
    loop's rows (``naive_rows``), not for a sample."""
    header = ("backend", "rows", "load_s", "prefill_s", "decode_s", "gen_s", "vs naive",
              "wall_s", "wall vs naive", "prompt tok/s", "gen tok/s", "peak MB", "reused",
              "forced", "identical")
    naive_wall = next((r["wall_s"] for r in reports if r["backend"] == "hf-generate"), None)
    lines = [header]
    for r in reports:
        ident = r.get("identical")
        same_rows = naive_rows is None or r["rows"] == naive_rows
        ratio = (f"{naive_s / r['generation_s']:.2f}x"
                 if naive_s and r["generation_s"] and same_rows else "-")
        lines.append((
            r["backend"], str(r["rows"]), f"{r['load_s']:.2f}",
            "-" if r["prefill_s"] is None else f"{r['prefill_s']:.2f}",
            "-" if r["decode_s"] is None else f"{r['decode_s']:.2f}",
            f"{r['generation_s']:.2f}", ratio, f"{r['wall_s']:.2f}",
            f"{naive_wall / r['wall_s']:.2f}x" if naive_wall and same_rows else "-",
            "-" if r["prompt_tokens_per_s"] is None else f"{r['prompt_tokens_per_s']:.0f}",
            "-" if r["generated_tokens_per_s"] is None else f"{r['generated_tokens_per_s']:.0f}",
            f"{r['peak_memory_bytes'] / 2**20:.0f}", f"{100 * r['reuse_fraction']:.1f}%",
            f"{r['forced_lengths_ok']}/{r['rows']}",
            "-" if ident is None else f"{ident['rows']}/{ident['of']} vs {ident['vs']}"))
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip()
                     for row in lines)
