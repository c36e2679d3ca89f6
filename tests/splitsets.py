"""Hand-made TS-Bench splits in the ToolSafe layout, with released logs and a lock.

A row is ``(domain, id_interaction, tool, gold)``; ``write_split`` writes the
split's files (one per domain, in the given order), optionally the released
``preds.json`` / ``labels.json`` / ``meta_data.json`` (parallel to the rows in
that order) and a local lock pinning every file, and returns the rows with
their base sample ids, so a test can write a run over them
(``recordsets.write_run(..., split=True)``: row id = base sample id) and
compute every expected figure by hand.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixtures.released_data import write_json

from guardrepro.bench.tsbench import BENCHMARK_FILES, base_sample_id

Row = tuple[str, int, str, float]  # domain, id-interaction, tool, gold


@dataclass(frozen=True)
class Split:
    root: Path  # the ToolSafe-layout directory
    lock: Path
    bases: list[tuple[str, str, float]]  # (base_sample_id, domain, gold), upstream order
    interactions: list[str]  # "<domain>/<id-interaction>" per row


def raw_row(domain: str, interaction: int, tool: str, gold: float, n: int) -> dict[str, Any]:
    return {"id-interaction": interaction, "id-segment": n,
            "instruction": f"task {domain} {n}", "history": "Thought: look",
            "current_action": f"Thought: act\nAction: {tool}\nAction Input: {{}}",
            "env_info": "tools", "score": gold}


def write_split(tmp: Path, benchmark: str, rows: Sequence[Row],
                released: Sequence[float | None] | None = None) -> Split:
    root = tmp / "toolsafe"
    files = BENCHMARK_FILES[benchmark]
    by_domain: dict[str, list[dict[str, Any]]] = {Path(f).stem: [] for f in files}
    for n, (domain, interaction, tool, gold) in enumerate(rows):
        by_domain[domain].append(raw_row(domain, interaction, tool, gold, n))
    ordered: list[tuple[str, dict[str, Any]]] = []
    for rel in files:
        domain = Path(rel).stem
        write_json(root / rel, by_domain[domain])
        ordered += [(domain, r) for r in by_domain[domain]]
    if released is not None:
        write_released(root, benchmark, [r for _, r in ordered], released)
    lock = write_lock(root, tmp / "locks" / "toolsafe.toml")
    return Split(root, lock,
                 [(base_sample_id(r), d, float(r["score"])) for d, r in ordered],
                 [f"{d}/{r['id-interaction']}" for d, r in ordered])


def write_lock(root: Path, lock: Path) -> Path:
    """A local files lock pinning every file below ``root`` (sha256 and size)."""
    entries = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        entries.append(f'[[file]]\npath = "{path.relative_to(root).as_posix()}"\n'
                       f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n')
    lock.parent.mkdir(parents=True, exist_ok=True)
    rel = Path(os.path.relpath(root, lock.parent)).as_posix()
    lock.write_text('name = "toolsafe-test"\nkind = "files"\n[source]\ntype = "local"\n'
                    f'path = "{rel}"\n\n' + "\n".join(entries), encoding="utf-8")
    return lock


def write_released(root: Path, benchmark: str, raws: Sequence[dict[str, Any]],
                   released: Sequence[float | None]) -> None:
    """preds / labels / meta_data of ``benchmark`` below ``root``, parallel to
    ``raws`` (the rows in upstream order), at the upstream folder."""
    from guardrepro.bench.released import released_paths

    preds, labels, meta = released_paths(root, benchmark)
    write_json(preds, list(released))
    write_json(labels, [r["score"] for r in raws])
    write_json(meta, [{"meta_sample": r, "guard_res": {"reason": "x"}} for r in raws])


def write_gate_spec(tmp: Path, benchmark: str, expected_rows: int | str,
                    thresholds: dict[str, float] | None = None, replicates: int = 2000) -> Path:
    """A released-reference gate spec over the split (lock ../locks/toolsafe.toml)."""
    thr = thresholds or {"min_coverage": 0.95, "min_strict_agreement": 0.90,
                         "min_strict_agreement_gold_safe": 0.85,
                         "min_strict_agreement_gold_unsafe": 0.85}
    rows = json.dumps(expected_rows) if isinstance(expected_rows, str) else expected_rows
    spec = tmp / "checks" / f"{benchmark}-split.toml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(
        f'name = "{benchmark}-split-test"\nrows = "originals"\n[reference]\n'
        f'type = "released"\nlock = "../locks/toolsafe.toml"\nbenchmark = "{benchmark}"\n'
        f"[thresholds]\nexpected_rows = {rows}\n"
        + "".join(f"{k} = {v}\n" for k, v in thr.items())
        + f"[bootstrap]\nreplicates = {replicates}\nseed = 7\n", encoding="utf-8")
    return spec
