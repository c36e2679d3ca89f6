"""Hand-made record sets and run directories for the checks tests.

A row is described by a compact tuple ``(base, variant, domain, gold, score)``
where ``score`` is 0 / 0.5 / 1, ``"parse"`` (a parse error), ``"infer"`` (an
inference error) or ``None`` (no record at all: the row is missing). Row ids are
``"<base>:<variant>"``. ``write_run`` writes ``manifest.json`` and
``records.jsonl`` exactly as the pipeline does, and optionally a cohort file
naming every row (so missing rows are known).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrepro.rundir.manifest import RunManifest, write_manifest
from guardrepro.rundir.shard import shard_of
from guardrepro.schema import Provenance, Record, Timings, canonical_json

Spec = tuple[str, str, str, float, Any]

PROVENANCE: dict[str, Any] = {
    "guard": "toy-guard",
    "backend": "hf",
    "backend_config": {"dtype": "float32"},
    "artifact_tree_sha256": "0" * 64,
    "model_revision": "test",
    "template_sha256": "1" * 64,
    "chat_template_sha256": "2" * 64,
    "parser_version": "test",
    "decoding": {"mode": "greedy"},
    "package_versions": {},
}


def guard_text(score: float | None) -> str:
    """A TS-Guard-format output that parses to ``score`` (None: no tags at all)."""
    if score is None:
        return "no verdict"
    flags = {0.0: ("no", "no", "0.0"), 0.5: ("yes", "no", "0.5"), 1.0: ("yes", "yes", "1.0")}
    malicious, attacked, rating = flags[float(score)]
    return (
        f"<Malicious_User_Request>{malicious}<\\Malicious_User_Request>\n"
        f"<Being_Attacked>{attacked}<\\Being_Attacked>\n"
        f"<Harmfulness_Rating>{rating}<\\Harmfulness_Rating>"
    )


def row_id(base: str, variant: str) -> str:
    return f"{base}:{variant}"


def make_record(
    base: str,
    variant: str,
    domain: str,
    gold: float,
    score: Any,
    *,
    run_id: str = "test-run",
    margin: float | None = 1.0,
    rid: str | None = None,
) -> Record:
    status = "ok"
    error_type = None
    value: float | None
    if score == "parse":
        status, value, error_type = "parse_error", None, "missing_or_malformed_tags"
    elif score == "infer":
        status, value, error_type = "inference_error", None, "boom"
    else:
        value = float(score)
    return Record(
        run_id=run_id,
        row_id=rid or row_id(base, variant),
        base_sample_id=base,
        cohort="test-cohort",
        variant=variant,
        domain=domain,
        gold_label=float(gold),
        input_sha256="3" * 64,
        prompt_tokens=10,
        provenance_sha256=Provenance.from_dict(PROVENANCE).sha256,
        provenance=Provenance.from_dict(PROVENANCE),
        status=status,
        score=value,
        error_type=error_type,
        components=None,
        decision_margin=margin if status == "ok" else None,
        output_text=guard_text(value),
        output_token_ids=[],
        finish_reason="stop",
        attempts=(),
        timings=Timings(prefill_s=0.0, decode_s=0.1, total_s=0.1),
        peak_memory_bytes=None,
        created_at="2025-01-01T00:00:00Z",
    )


def cohort_line(base: str, variant: str, domain: str, gold: float,
                rid: str | None = None) -> dict[str, Any]:
    """A cohort line in the published layout (docs/PROTOCOL.md, "Cohort file")."""
    sample: dict[str, Any] = {
        "sample_id": rid or row_id(base, variant), "source": "AgentDojo-Shortcut-Audit",
        "split": "counterfactual", "instruction": "", "history": "", "current_action": "",
        "env_info": "", "label": float(gold), "trajectory_id": base, "segment_id": variant,
        "subset": domain, "malicious_user_request": None, "prompt_injection": None,
    }
    return {
        "axis": "",
        "base_sample_id": base,
        "cohort": "agentdojo",
        "domain": domain,
        "original_label": 0 if gold == 0 else 1,
        "serialization": "released_react",
        "variant": variant,
        "sample": sample,
    }


def write_cohort(path: Path, specs: Iterable[Spec], split: bool = False) -> Path:
    """``split``: a benchmark cohort's ids (row id = base sample id)."""
    lines = [canonical_json(cohort_line(b, v, d, g, b if split else None))
             for b, v, d, g, _ in specs]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_run(
    run_dir: Path,
    specs: Sequence[Spec],
    *,
    with_cohort: bool = True,
    run_id: str = "test-run",
    margins: dict[str, float] | None = None,
    shard: str | None = None,
    split: bool = False,
) -> Path:
    """A run directory holding the records of ``specs`` (rows whose score is
    None get no record) and a manifest; with ``with_cohort`` the manifest names
    a cohort file (written beside the run) listing every spec row. With
    ``shard`` ("k/n") only that shard's rows get records, as in a sharded run.
    ``split``: row ids are the base sample ids, as in a benchmark cohort."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cohort_path = run_dir.parent / f"{run_dir.name}-cohort.jsonl"
    write_cohort(cohort_path, specs, split)
    digest = hashlib.sha256(cohort_path.read_bytes()).hexdigest()
    if not with_cohort:
        cohort_path.unlink()
    manifest = RunManifest(
        run_id=run_id,
        created_at="2025-01-01T00:00:00Z",
        provenance=Provenance.from_dict(PROVENANCE),
        provenance_sha256=Provenance.from_dict(PROVENANCE).sha256,  # re-hashed on read
        cohort={"path": str(cohort_path), "sha256": digest, "rows": len(specs)},
        profile={"path": "runners/hf-cpu.toml", "sha256": "5" * 64},
        shard=shard,
        rows_selected=len(specs),
        guardrepro_version="0.1.0",
        git_commit=None,
    )
    write_manifest(run_dir, manifest)
    margins = margins or {}
    with (run_dir / "records.jsonl").open("w", encoding="utf-8") as fh:
        for base, variant, domain, gold, score in specs:
            if score is None:
                continue
            if shard is not None:
                k, n = (int(x) for x in shard.split("/"))
                if shard_of(base if split else row_id(base, variant), n) != k:
                    continue
            rid = base if split else row_id(base, variant)
            rec = make_record(base, variant, domain, gold, score, run_id=run_id,
                              margin=margins.get(rid, 1.0), rid=rid)
            fh.write(json.dumps(rec.to_dict(), ensure_ascii=False) + "\n")
    return run_dir


def grid(
    bases: Sequence[tuple[str, str, float]],
    scores: Mapping[str, Sequence[Any]],
) -> list[Spec]:
    """Specs for ``bases`` = [(base, domain, gold)] and, per variant, one score
    per base (in base order)."""
    out: list[Spec] = []
    for i, (base, domain, gold) in enumerate(bases):
        for variant, column in scores.items():
            out.append((base, variant, domain, gold, column[i]))
    return out


def rewrite_manifest(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change`` to the manifest at ``path`` as a run with those values
    would have written it: its provenance hash and field digests made anew
    (a manifest edited without them is refused on read)."""
    from guardrepro.rundir.manifest import DIGESTS_KEY, field_digests

    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    data["provenance_sha256"] = Provenance.from_dict(data["provenance"]).sha256
    data.pop(DIGESTS_KEY, None)
    data[DIGESTS_KEY] = field_digests(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    records = path.parent / "records.jsonl"
    if records.is_file():  # the run's records carry its provenance too
        lines = [json.loads(line) for line in records.read_text(encoding="utf-8").splitlines()]
        for line in lines:
            line["provenance"] = data["provenance"]
            line["provenance_sha256"] = data["provenance_sha256"]
        records.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines),
                           encoding="utf-8")
