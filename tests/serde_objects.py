"""Real objects of every class whose JSON is derived by ``checks.core.serde``,
built from the toy demo's files (``tests/fixtures/serde``) and by hand.

``golden()`` maps a name to the JSON object of one such value; the files in
``tests/fixtures/serde/golden.json`` were written by the hand-written
serialisers these classes had before their JSON was derived from their
fields, so a test comparing the two proves the bytes did not move.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests/fixtures/serde"
GOLDEN = FIXTURES / "golden.json"


def text(value: Any) -> str:
    """The JSON text every writer of the project uses (``rundir.outputs.write_json_atomic``)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _merge() -> Any:
    from guardrepro.run.merge import MergeReport, SourceRun
    from guardrepro.run.merge_index import RecordIndex
    from guardrepro.rundir.manifest import RunManifest
    from guardrepro.schema import Record

    manifest = RunManifest.from_dict(json.loads((FIXTURES / "manifest.json").read_text()))
    records = [Record.from_dict(json.loads(line))
               for line in (FIXTURES / "records.jsonl").read_text().splitlines()]
    def index(part: list[Record], path: str) -> RecordIndex:  # only the row count is written
        return RecordIndex(Path(path), -1, rows={r.row_id: 0 for r in part})

    src = [SourceRun(Path("/runs/a/hf-fp32"), manifest, index(records[:2], "/runs/a"), "ab" * 32),
           SourceRun(Path("/runs/b/hf-fp32"), manifest, index(records[2:], "/runs/b"), "cd" * 32)]
    return MergeReport(Path("/runs/hf-fp32"), "hf-fp32", src, 5, len(records), ["r9"], True)


def _doctor() -> list[Any]:
    from guardrepro.run.doctor import DoctorReport, Facts, Verdict

    facts = Facts("vllm", {"vllm": "0.11.0", "torch": "2.8.0"}, "cuda", "NVIDIA H100", (9, 0),
                  "bfloat16", 8, True, False, 8, None, {"VLLM_BATCH_INVARIANT": "1", "X": None})
    bare = Facts(None, {}, "cpu", None, None, None, None, None, None, None, 2)
    return [DoctorReport(facts, Verdict("supported", "batch-invariant kernels", 3), True,
                         "runners/vllm.toml", ("a warning",)),
            DoctorReport(bare, None, False, None)]


def _invariance() -> Any:
    from guardrepro.run.invariance import InvarianceReport, RowAgreement

    rows = [RowAgreement("r1", True, None, 12, 12, 12, "stop", "stop"),
            RowAgreement("r2", False, 3, 3, 9, 10, "stop", "length")]
    return InvarianceReport("runners/toy-hf.toml", "hf", "cohort.jsonl", "ef" * 32, 2, 7, 4,
                            {"temperature": 0.0}, {"dtype": "float32"}, rows, 0.5, 0.25,
                            ["a note"])


def _run_summary() -> Any:
    from guardrepro.run.pipeline import RunSummary

    return RunSummary(Path("/runs/hf-fp32"), "hf-fp32", 64, 64, 10, 54, 0,
                      {"ok": 53, "parse_error": 1}, 1.5, 100.25, 101.75)


def _recipes() -> list[Any]:
    from guardrepro.artifacts.quantize.recipe import load_recipe

    return [load_recipe(p) for p in sorted((ROOT / "quantize").glob("*.toml"))]


def _reparse() -> list[Any]:
    from guardrepro.bench.released import ReparseRow

    return [ReparseRow(0, "b0", "shopping", 1.0, 1.0, "ok", 1.0, None, True),
            ReparseRow(1, "b1", None, 0.0, None, "parse_error", None, "no_verdict", False)]


def _interval() -> Any:
    from guardrepro.checks.core.bootstrap import ratio_interval

    return ratio_interval([1, 0, 2, 1], [2, 1, 2, 3], ["a", "b", "c", "d"], replicates=50,
                          seed=3)


def _published() -> Any:
    from guardrepro.checks.parity.published import compare, load_published

    documents = {"stats": json.loads((FIXTURES / "stats.json").read_text()),
                 "gate": json.loads((FIXTURES / "gate.json").read_text()), "audit": None}
    return compare(load_published(ROOT / "checks/published/ts-guard-q8.toml"), documents,
                   {"stats": "stats.json", "gate": "gate.json"})


def _attribution() -> Any:
    from guardrepro.checks.parity.attribute import attribute
    from guardrepro.checks.parity.loaders import load_reference, load_run_input

    ref, key_field, info = load_reference(ROOT / "checks/toy-guard.toml")
    run = load_run_input(FIXTURES / "records.jsonl", key_field)
    return attribute(ref, key_field=key_field, reference_info=info, bf16=run, replicates=20)


BUILDERS = {"merge": _merge, "doctor": _doctor, "invariance": _invariance,
            "run_summary": _run_summary, "recipes": _recipes, "reparse": _reparse,
            "interval": _interval, "published": _published, "attribution": _attribution}


def as_json(value: Any) -> Any:
    """``to_dict()`` of a value or of each value of a list."""
    if isinstance(value, list):
        return [v.to_dict() for v in value]
    return value.to_dict()


def golden() -> dict[str, Any]:
    """name -> the JSON object of that builder's value, as written now."""
    return {name: json.loads(text(as_json(build())).replace(str(ROOT), "$ROOT"))
            for name, build in BUILDERS.items()}


if __name__ == "__main__":  # rewrite the golden file (only with the serialisers it pins)
    GOLDEN.write_text(text(golden()))
