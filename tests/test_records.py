"""records.jsonl and manifest.json: durable appends, torn lines, one writer, strict reads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from recordsets import PROVENANCE, guard_text

from guardrepro.errors import InputError, ProvenanceError
from guardrepro.rundir.manifest import RunManifest, check_resumable, read_manifest, write_manifest
from guardrepro.rundir.records import (
    LOCK_FILE,
    RECORDS_FILE,
    RecordWriter,
    TornRecordWarning,
    read_records,
    record_line,
)
from guardrepro.schema import Attempt, Provenance, Record, Timings


def record(row_id: str, **changes: Any) -> Record:
    data: dict[str, Any] = {
        "run_id": "run1",
        "row_id": row_id,
        "base_sample_id": "b1",
        "cohort": "c",
        "variant": "original",
        "domain": "banking",
        "gold_label": 1.0,
        "input_sha256": "0" * 64,
        "prompt_tokens": 12,
        "provenance_sha256": "a" * 64,
        "provenance": PROVENANCE,
        "status": "ok",
        "score": 0.5,
        "error_type": None,
        "components": {"harmfulness_rating": 0.5},
        "decision_margin": 1.25,
        "output_text": 'héllo "quoted"\nline' + guard_text(0.5),
        "output_token_ids": [5, 6, 2],
        "finish_reason": "stop",
        "attempts": [],
        "timings": {"prefill_s": 0.1, "decode_s": 0.2, "total_s": 0.3},
        "peak_memory_bytes": 1000,
        "created_at": "2026-01-01T00:00:00Z",
    }
    data.update(changes)
    return Record.from_dict(data)


def test_append_then_read_back(tmp_path: Path) -> None:
    with RecordWriter(tmp_path / "run") as writer:
        writer.append(record("a"))
        writer.append(
            record("b", status="parse_error", score=None, error_type="x", output_text="no tags")
        )
    data = (tmp_path / "run" / RECORDS_FILE).read_bytes()
    lines = data.split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3  # two complete lines, nothing else
    assert json.loads(lines[0])["output_text"] == 'héllo "quoted"\nline' + guard_text(0.5)
    assert read_records(tmp_path / "run") == [
        record("a"),
        record("b", status="parse_error", score=None, error_type="x", output_text="no tags"),
    ]


def test_writer_loads_existing_and_refuses_duplicates(tmp_path: Path) -> None:
    with RecordWriter(tmp_path) as writer:
        writer.append(record("a"))
    with RecordWriter(tmp_path) as writer:
        assert set(writer.records) == {"a"}
        with pytest.raises(InputError, match="already has a record"):
            writer.append(record("a"))
        writer.append(record("b"))
    assert [r.row_id for r in read_records(tmp_path / RECORDS_FILE)] == ["a", "b"]


def test_duplicate_row_ids_in_file_are_an_error(tmp_path: Path) -> None:
    line = json.dumps(record("a").to_dict())
    path = tmp_path / RECORDS_FILE
    path.write_text(line + "\n" + line + "\n")
    with pytest.raises(InputError, match=r"line 2.*duplicate row_id 'a' \(first at line 1\)"):
        read_records(path)
    with pytest.raises(InputError, match="duplicate"):
        RecordWriter(tmp_path)


def test_invalid_record_names_file_row_and_field(tmp_path: Path) -> None:
    good = record("a").to_dict()
    bad = dict(record("b").to_dict(), surprise=1)
    path = tmp_path / RECORDS_FILE
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(InputError) as err:
        read_records(path)
    assert str(path) in str(err.value) and "line 2" in str(err.value)
    assert err.value.field == "surprise"
    path.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(InputError, match="line 2"):
        read_records(path)


REFERENCE = Path(__file__).resolve().parents[1] / "guardrepro/data/toy_reference/records.jsonl"


def test_shipped_reference_records_reserialise_byte_for_byte() -> None:
    """Every line of the shipped reference run, read into typed values and
    written back by ``record_line``, is the same bytes; the nested values are
    objects, not dicts (spot-checked against the raw JSON)."""
    raw = REFERENCE.read_bytes()
    lines = raw.splitlines(keepends=True)
    records = read_records(REFERENCE)
    assert len(records) == len(lines) == 256
    for line, rec in zip(lines, records, strict=True):
        assert record_line(rec).encode("utf-8") == line
    data = json.loads(lines[0])
    first = records[0]
    assert isinstance(first.provenance, Provenance) and isinstance(first.timings, Timings)
    assert first.provenance.guard == data["provenance"]["guard"] == "toy-guard"
    assert first.provenance.sha256 == first.provenance_sha256
    assert first.timings.total_s == data["timings"]["total_s"]
    assert [a.token_ids for a in first.attempts] == [a["token_ids"] for a in data["attempts"]]
    assert isinstance(first.attempts, tuple) and isinstance(first.attempts[0], Attempt)


def _attempt(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"text": guard_text(0.5), "token_ids": [1], "finish_reason": "stop",
                           "status": "ok", "score": 0.5, "error_type": None,
                           "decision_margin": 1.0, "seed": None}
    out.update(changes)
    return out


def _without(data: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != key}


NESTED_FAULTS: list[tuple[str, Any, str, str]] = [
    ("attempts", [_attempt(), _without(_attempt(), "status")], "attempts[1].status", "missing"),
    ("attempts", [_attempt(colour="red")], "attempts[0].colour", "unknown"),
    ("attempts", [_attempt(), "text"], "attempts[1]", "JSON object"),
    ("attempts", {"0": _attempt()}, "attempts", "a list"),
    ("timings", {"decode_s": 0.2, "total_s": 0.3}, "timings.prefill_s", "missing"),
    ("timings", {"prefill_s": 0.1, "decode_s": 0.2, "total_s": 0.3, "wall_s": 1.0},
     "timings.wall_s", "unknown"),
    ("timings", {"prefill_s": -0.1, "decode_s": 0.2, "total_s": 0.3}, "timings.prefill_s",
     "non-negative"),
    ("timings", {"prefill_s": True, "decode_s": 0.2, "total_s": 0.3}, "timings.prefill_s",
     "non-negative"),
    ("timings", [0.1, 0.2, 0.3], "timings", "JSON object"),
    ("provenance", _without(PROVENANCE, "guard"), "provenance.guard", "missing"),
    ("provenance", {**PROVENANCE, "host": "x"}, "provenance.host", "unknown"),
    ("provenance", {**PROVENANCE, "backend": 3}, "provenance.backend", "string"),
    ("provenance", {**PROVENANCE, "guard": None}, "provenance.guard", "string"),
    ("provenance", {**PROVENANCE, "decoding": "greedy"}, "provenance.decoding", "object"),
]


@pytest.mark.parametrize(("key", "value", "field", "says"), NESTED_FAULTS)
def test_nested_values_are_read_strictly(tmp_path: Path, key: str, value: Any, field: str,
                                         says: str) -> None:
    good = record("a").to_dict()
    bad = dict(record("b").to_dict(), **{key: value})
    path = tmp_path / RECORDS_FILE
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(InputError) as err:
        read_records(path)
    assert err.value.file == str(path) and err.value.row == 1
    assert err.value.field == field and says in str(err.value)


def test_a_checkpoint_without_chat_template_has_a_null_hash(tmp_path: Path) -> None:
    rec = record("a", provenance={**PROVENANCE, "chat_template_sha256": None})
    with RecordWriter(tmp_path) as writer:
        writer.append(rec)
    (back,) = read_records(tmp_path)
    assert back == rec and back.provenance.chat_template_sha256 is None


def test_record_refuses_untyped_nested_values() -> None:
    data = record("a").to_dict()
    with pytest.raises(TypeError, match="Provenance"):
        Record(**data)  # plain dicts where the typed values belong
    typed = record("a", attempts=[_attempt()])
    assert typed.attempts == (Attempt(**_attempt()),)
    assert typed.to_dict()["attempts"] == [_attempt()]


def test_torn_final_line_is_refused_by_readers_and_truncated_on_resume(tmp_path: Path) -> None:
    with RecordWriter(tmp_path) as writer:
        writer.append(record("a"))
        writer.append(record("b"))
    path = tmp_path / RECORDS_FILE
    complete = path.read_bytes()
    torn_line = json.dumps(record("c").to_dict()).encode()
    path.write_bytes(complete + torn_line[:57])  # killed in the middle of a write
    with pytest.raises(InputError, match=r"line 3.*incomplete"):
        read_records(path)
    with pytest.warns(TornRecordWarning, match="57 bytes"), RecordWriter(tmp_path) as writer:
        assert writer.truncated_bytes == 57
        assert set(writer.records) == {"a", "b"}
        assert path.read_bytes() == complete
        writer.append(record("c"))
    assert [r.row_id for r in read_records(path)] == ["a", "b", "c"]
    # a torn line that happens to be complete JSON without its newline is still torn
    path.write_bytes(path.read_bytes() + json.dumps(record("d").to_dict()).encode())
    with pytest.warns(TornRecordWarning), RecordWriter(tmp_path) as writer:
        assert set(writer.records) == {"a", "b", "c"}


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    first = RecordWriter(tmp_path)
    try:
        with pytest.raises(InputError, match="another guardrepro run"):
            RecordWriter(tmp_path)
        # another process is refused too
        code = (
            "import sys\nfrom guardrepro.rundir.records import RecordWriter\n"
            "from guardrepro.errors import InputError\n"
            f"try:\n    RecordWriter({str(tmp_path)!r})\nexcept InputError as e:\n"
            "    print(e); sys.exit(7)\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert proc.returncode == 7, proc.stderr
        assert LOCK_FILE in proc.stdout
    finally:
        first.close()
    with RecordWriter(tmp_path) as again:  # released on close
        again.append(record("a"))


def manifest(**changes: Any) -> RunManifest:
    provenance = Provenance.from_dict(
        {**PROVENANCE, "backend_config": {"dtype": "float32", "batch_size": 1}})
    data: dict[str, Any] = {
        "run_id": "run1",
        "created_at": "2026-01-01T00:00:00Z",
        "provenance": provenance,
        "provenance_sha256": provenance.sha256,
        "cohort": {"path": "/c.jsonl", "sha256": "c" * 64, "rows": 4},
        "profile": {"path": "/p.toml", "sha256": "f" * 64},
        "shard": None,
        "rows_selected": 4,
        "guardrepro_version": "0.1.0",
        "git_commit": None,
    }
    data.update(changes)
    return RunManifest(**data)


def test_manifest_roundtrip_atomic(tmp_path: Path) -> None:
    assert read_manifest(tmp_path) is None
    write_manifest(tmp_path, manifest())
    assert read_manifest(tmp_path) == manifest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]  # no temp left
    data = json.loads((tmp_path / "manifest.json").read_text())
    data["extra_key"] = 1
    (tmp_path / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="extra_key"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_bytes(b'{"run_id": "caf\xe9"}')  # Latin-1, not UTF-8
    with pytest.raises(InputError, match="not UTF-8") as info:
        read_manifest(tmp_path)
    assert str(tmp_path / "manifest.json") in str(info.value)


def test_resume_check_lists_every_difference(tmp_path: Path) -> None:
    old = manifest()
    check_resumable(old, manifest(created_at="later", git_commit="x" * 40), tmp_path)  # same run
    new = manifest(
        provenance=Provenance.from_dict(
            {**PROVENANCE, "backend_config": {"dtype": "bfloat16", "batch_size": 1}}),
        provenance_sha256="q" * 64,
        cohort={"path": "/other.jsonl", "sha256": "d" * 64, "rows": 4},
        shard="1/2",
    )
    with pytest.raises(ProvenanceError) as err:
        check_resumable(old, new, tmp_path)
    message = str(err.value)
    assert "provenance.backend_config.dtype: 'float32' != 'bfloat16'" in message
    assert "batch_size" not in message
    assert "cohort.sha256" in message and "shard: None != '1/2'" in message
