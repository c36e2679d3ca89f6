"""TS-Bench loading: order, ids, and strict errors naming file, row and field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from fixtures.released_data import agentdojo_rows, agentharm_rows, make_row, write_bench, write_json

from guardrepro.bench.tsbench import base_sample_id, load_bench_file, load_benchmark
from guardrepro.errors import InputError


def test_base_sample_id_by_hand() -> None:
    row = {
        "instruction": "Pay Bob",
        "history": [{"b": 1, "a": "\u00e9"}],
        "current_action": "Action: send_money",
        "env_info": None,
    }
    # list -> json.dumps(sort_keys=True, ensure_ascii=False); None -> ""; joined by U+001F
    joined = 'Pay Bob\x1f[{"a": "\u00e9", "b": 1}]\x1fAction: send_money\x1f'
    assert base_sample_id(row) == hashlib.sha256(joined.encode("utf-8")).hexdigest()[:20]
    row2 = {**row, "history": "plain text", "env_info": {"z": [1, 2], "y": None}}
    joined2 = 'Pay Bob\x1fplain text\x1fAction: send_money\x1f{"y": null, "z": [1, 2]}'
    assert base_sample_id(row2) == hashlib.sha256(joined2.encode("utf-8")).hexdigest()[:20]
    assert len(base_sample_id(row2)) == 20


def test_agentdojo_upstream_order(tmp_path: Path) -> None:
    files = agentdojo_rows()
    write_bench(tmp_path, files)
    rows = load_benchmark(tmp_path, "agentdojo")
    domains = [row.domain for row in rows]
    assert domains == ["workspace"] * 2 + ["travel"] * 2 + ["slack"] * 2 + ["banking"] * 2
    assert [row.index for row in rows] == [0, 1] * 4
    assert rows[2].interaction_id == "travel/0"
    assert rows[2].file == str(tmp_path / "TS-Bench/agentdojo-traj/travel.json")
    # nothing coerced: the raw rows are exactly what was written
    assert [row.raw for row in rows] == [r for rs in files.values() for r in rs]
    assert type(rows[1].raw["score"]) is int and rows[1].score == 1.0
    assert rows[0].base_sample_id == base_sample_id(
        files["TS-Bench/agentdojo-traj/workspace.json"][0]
    )


def test_agentharm_upstream_order(tmp_path: Path) -> None:
    write_bench(tmp_path, agentharm_rows())
    rows = load_benchmark(tmp_path, "agentharm")
    assert [row.domain for row in rows] == ["harmful_steps", "harmful_steps", "benign_steps"]
    assert [row.score for row in rows] == [0.5, 1.0, 0.0]
    assert rows[2].interaction_id == "benign_steps/b1"


def _write_one(tmp_path: Path, rows: list[Any]) -> Path:
    return write_json(tmp_path / "banking.json", rows)


def _bad(**override: Any) -> dict[str, Any]:
    row = make_row(1, 2, 0, "x")
    row.update(override)
    return row


def _missing_history() -> dict[str, Any]:
    row = _bad()
    del row["history"]
    return row


MALFORMED = [
    (_missing_history(), "history"),
    (_bad(extra_field=1), "extra_field"),
    (_bad(score=0.7), "score"),
    (_bad(score=True), "score"),
    (_bad(score="1"), "score"),
    (_bad(score=None), "score"),
    (_bad(instruction=3), "instruction"),
    (_bad(current_action={"tool": "x"}), "current_action"),
    (_bad(history=5), "history"),
    (_bad(env_info=True), "env_info"),
    (_bad(**{"id-interaction": True}), "id-interaction"),
    (_bad(**{"id-segment": 1.5}), "id-segment"),
    (_bad(**{"id-segment": None}), "id-segment"),
]


@pytest.mark.parametrize(("row", "field"), MALFORMED)
def test_malformed_rows_name_file_row_field(
    tmp_path: Path, row: dict[str, Any], field: str
) -> None:
    path = _write_one(tmp_path, [make_row(0, 0, 1, "ok"), row])
    with pytest.raises(InputError) as info:
        load_bench_file(path, "banking")
    err = info.value
    assert (err.file, err.row, err.field) == (str(path), 1, field)
    assert str(path) in str(err) and "row 1" in str(err) and repr(field) in str(err)


def test_accepted_context_types(tmp_path: Path) -> None:
    rows = [
        make_row(0, 0, 0, "a", history=None, env_info=None),
        make_row(0, 1, 0.5, "b", history="text", env_info={"tools": ["x"]}),
        make_row("7", "s", 1.0, "c", history=[], env_info=[]),
    ]
    loaded = load_bench_file(_write_one(tmp_path, rows), "banking")
    assert [row.raw for row in loaded] == rows


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"rows": []}', "expected a JSON list"),
        ("[]", "no rows"),
        ("[1]", "row 0"),
        ("[{", "invalid JSON"),
        ('[{"score": NaN}]', "invalid JSON"),
        ('[{"score": 1, "score": 0}]', "duplicate key 'score'"),
    ],
)
def test_malformed_files(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "slack.json"
    path.write_text(content)
    with pytest.raises(InputError, match=needle) as info:
        load_bench_file(path, "slack")
    assert info.value.file == str(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"workspace\.json"):
        load_benchmark(tmp_path, "agentdojo")


def test_duplicate_ids_name_both_rows(tmp_path: Path) -> None:
    files = agentdojo_rows()
    copy = dict(files["TS-Bench/agentdojo-traj/workspace.json"][1])
    copy["score"] = 0  # same content fields, different label: still the same base id
    files["TS-Bench/agentdojo-traj/banking.json"].append(copy)
    write_bench(tmp_path, files)
    with pytest.raises(InputError) as info:
        load_benchmark(tmp_path, "agentdojo")
    message = str(info.value)
    assert "banking.json" in message and "row 2" in message
    assert "workspace.json row 1" in message
    assert json.loads(json.dumps(copy))  # the row itself was valid
