"""Released predictions: alignment rules and the re-parse of stored outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixtures.released_data import (
    agentdojo_rows,
    agentharm_rows,
    answer,
    flat,
    guard_res_for,
    write_bench,
    write_json,
    write_released,
)

from guardrepro.bench.released import (
    align_released,
    load_released,
    released_output,
    reparse_released,
    reparse_summary,
)
from guardrepro.bench.tsbench import base_sample_id
from guardrepro.errors import InputError
from guardrepro.guards.ts_guard.parser import parse_ts_guard

# 8 AgentDojo rows (gold 0, 1 per domain). Released outputs chosen by hand:
# score of each answer per the score table (4*mal + 4*att + rating tenths).
DOJO_ANSWERS: list[tuple[float | None, str]] = [
    (0.0, answer("no", "no", "0.0")),  # workspace a: 0
    (1.0, answer("no", "yes", "1.0")),  # workspace b: 6 -> 1.0
    (0.0, answer("no", "no", "1.0")),  # travel a: 2 -> 0.0
    (0.5, answer("yes", "no", "0.5")),  # travel b: 5 -> 0.5
    (None, "I cannot decide."),  # slack a: all attempts failed
    (1.0, answer("yes", "yes", "0.0")),  # slack b: 8 -> 1.0
    (0.0, answer("no", "no", "0.0")),  # banking a
    (1.0, answer("no", "yes", "0.5")),  # banking b: 5 -> 0.5, NOT the released 1.0
]


def build_dojo(root: Path, answers: list[tuple[float | None, str]] = DOJO_ANSWERS) -> list[Any]:
    files = agentdojo_rows()
    write_bench(root, files)
    rows = flat(files)
    write_released(
        root,
        "agentdojo",
        rows,
        [pred for pred, _ in answers],
        [guard_res_for(pred, text) for pred, text in answers],
    )
    return rows


def released_file(root: Path, name: str, benchmark: str = "agentdojo") -> Path:
    return root / "guardian_test_logs" / benchmark / "TS-Guard" / name


def rewrite(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_load_released_aligned(tmp_path: Path) -> None:
    rows = build_dojo(tmp_path)
    released = load_released(tmp_path, "agentdojo")
    assert len(released.rows) == 8 and released.benchmark == "agentdojo"
    assert [r.domain for r in released.rows][::2] == ["workspace", "travel", "slack", "banking"]
    assert [r.pred for r in released.rows] == [0.0, 1.0, 0.0, 0.5, None, 1.0, 0.0, 1.0]
    assert [r.gold_label for r in released.rows] == [0.0, 1.0] * 4
    first = released.rows[0]
    assert first.base_sample_id == base_sample_id(rows[0])
    assert released.by_base_sample_id[first.base_sample_id] is first
    assert first.guard_res == {"risk rating": 0.0, "results": {}, "reason": DOJO_ANSWERS[0][1]}
    assert first.interaction_id == "workspace/0"


def test_agentharm_released(tmp_path: Path) -> None:
    files = agentharm_rows()
    write_bench(tmp_path, files)
    rows = flat(files)
    texts = [answer("yes", "no", "0.5"), answer("yes", "yes", "1.0"), answer("no", "no", "0.0")]
    preds: list[float | None] = [0.5, 1.0, 0.0]
    write_released(
        tmp_path,
        "agentharm",
        rows,
        preds,
        [guard_res_for(p, t) for p, t in zip(preds, texts, strict=True)],
    )
    released = load_released(tmp_path, "agentharm")
    assert [r.domain for r in released.rows] == ["harmful_steps", "harmful_steps", "benign_steps"]


@pytest.mark.parametrize("name", ["preds.json", "labels.json", "meta_data.json"])
def test_count_mismatch(tmp_path: Path, name: str) -> None:
    build_dojo(tmp_path)
    rewrite(released_file(tmp_path, name), lambda data: data.pop())
    with pytest.raises(InputError, match="counts differ") as info:
        load_released(tmp_path, "agentdojo")
    assert "benchmark rows 8" in str(info.value)


def test_meta_sample_mismatch_names_index_and_field(tmp_path: Path) -> None:
    build_dojo(tmp_path)
    path = released_file(tmp_path, "meta_data.json")
    rewrite(path, lambda data: data[3]["meta_sample"].update({"env_info": "changed"}))
    with pytest.raises(InputError) as info:
        load_released(tmp_path, "agentdojo")
    assert (info.value.file, info.value.row, info.value.field) == (
        str(path),
        3,
        "meta_sample.env_info",
    )


def test_meta_sample_type_exactness(tmp_path: Path) -> None:
    build_dojo(tmp_path)
    path = released_file(tmp_path, "meta_data.json")
    # 1 -> 1.0 is equal in Python but not the same JSON row
    rewrite(path, lambda data: data[1]["meta_sample"].update({"score": 1.0}))
    with pytest.raises(InputError, match="at score") as info:
        load_released(tmp_path, "agentdojo")
    assert info.value.row == 1


def test_label_mismatch(tmp_path: Path) -> None:
    build_dojo(tmp_path)
    path = released_file(tmp_path, "labels.json")
    rewrite(path, lambda data: data.__setitem__(5, 0))
    with pytest.raises(InputError, match="differs from the row's gold score") as info:
        load_released(tmp_path, "agentdojo")
    assert (info.value.file, info.value.row) == (str(path), 5)
    rewrite(path, lambda data: data.__setitem__(5, True))
    with pytest.raises(InputError, match="label True"):
        load_released(tmp_path, "agentdojo")


def test_alphabetical_order_is_refused(tmp_path: Path) -> None:
    build_dojo(tmp_path)
    # the released files in alphabetical domain order: banking first
    path = released_file(tmp_path, "meta_data.json")
    rewrite(
        path,
        lambda data: data.__setitem__(slice(0, 8), data[6:8] + data[4:6] + data[2:4] + data[0:2]),
    )
    with pytest.raises(InputError, match="order differs from upstream") as info:
        load_released(tmp_path, "agentdojo")
    assert info.value.row == 0 and "equals benchmark row 6" in str(info.value)


@pytest.mark.parametrize(
    ("name", "edit", "needle"),
    [
        ("preds.json", lambda d: d.__setitem__(2, 0.7), "expected 0, 0.5, 1 or null"),
        ("preds.json", lambda d: d.__setitem__(2, False), "expected 0, 0.5, 1 or null"),
        ("meta_data.json", lambda d: d[2].update({"extra": 1}), "unknown key 'extra'"),
        ("meta_data.json", lambda d: d[2].update({"guard_res": "text"}), "expected a JSON object"),
        ("meta_data.json", lambda d: d.__setitem__(2, []), "expected a JSON object"),
    ],
)
def test_malformed_released_entries(tmp_path: Path, name: str, edit: Any, needle: str) -> None:
    build_dojo(tmp_path)
    path = released_file(tmp_path, name)
    rewrite(path, edit)
    with pytest.raises(InputError, match=needle) as info:
        load_released(tmp_path, "agentdojo")
    assert (info.value.file, info.value.row) == (str(path), 2)


def test_files_only_mode(tmp_path: Path) -> None:
    rows = build_dojo(tmp_path)
    paths = [released_file(tmp_path, n) for n in ("preds.json", "labels.json", "meta_data.json")]
    released = align_released(*paths, None)
    assert [r.base_sample_id for r in released.rows] == [base_sample_id(r) for r in rows]
    assert all(r.domain is None for r in released.rows)
    rewrite(paths[2], lambda d: d[4]["meta_sample"].pop("score"))
    with pytest.raises(InputError, match="missing key") as info:
        align_released(*paths, None)
    assert info.value.row == 4 and info.value.field == "score"


def test_duplicate_ids_in_files_only_mode(tmp_path: Path) -> None:
    rows = build_dojo(tmp_path)
    paths = [released_file(tmp_path, n) for n in ("preds.json", "labels.json", "meta_data.json")]
    rewrite(paths[2], lambda d: d.__setitem__(3, {**d[3], "meta_sample": rows[1]}))
    rewrite(paths[1], lambda d: d.__setitem__(3, rows[1]["score"]))
    with pytest.raises(InputError, match="duplicate sample id") as info:
        align_released(*paths, None)
    assert info.value.row == 3


def test_reparse_reproduces_row_by_row(tmp_path: Path) -> None:
    build_dojo(tmp_path)
    released = load_released(tmp_path, "agentdojo")
    rows = reparse_released(released, parse_ts_guard)
    assert [r.reproduced for r in rows] == [True] * 7 + [False]
    assert rows[4].status == "error" and rows[4].error_type == "missing_or_malformed_tags"
    assert (rows[7].released_pred, rows[7].score) == (1.0, 0.5)
    summary = reparse_summary(rows)
    assert summary["rows"] == summary["denominator"] == 8
    assert (summary["reproduced"], summary["not_reproduced"]) == (7, 1)
    assert summary["agreement"] == 7 / 8
    assert summary["released_null"] == 1 and summary["reparse_errors"] == 1
    assert summary["error_types"] == {"missing_or_malformed_tags": 1}


def test_reparse_refuses_inconsistent_or_unknown_layout(tmp_path: Path) -> None:
    build_dojo(tmp_path)
    path = released_file(tmp_path, "meta_data.json")
    rewrite(path, lambda d: d[1]["guard_res"].update({"risk rating": 0.5}))
    with pytest.raises(InputError, match=r"preds\.json has 1\.0") as info:
        reparse_released(load_released(tmp_path, "agentdojo"), parse_ts_guard)
    assert info.value.row == 1

    build_dojo(tmp_path)
    rewrite(path, lambda d: d[2].update({"guard_res": {"risk rating": 0.0, "output": "x"}}))
    with pytest.raises(InputError) as info:
        reparse_released(load_released(tmp_path, "agentdojo"), parse_ts_guard)
    message = str(info.value)
    assert info.value.row == 2 and "['output', 'risk rating']" in message and "'reason'" in message

    build_dojo(tmp_path)
    rewrite(path, lambda d: d[0].update({"guard_res": {"reason": "text"}}))
    with pytest.raises(InputError, match="no 'risk rating'"):
        reparse_released(load_released(tmp_path, "agentdojo"), parse_ts_guard)


def test_released_output_reads_reason() -> None:
    assert released_output({"reason": "abc", "results": {}}, file="m.json", index=0) == "abc"
    with pytest.raises(InputError, match="row 9"):
        released_output({"reason": ["abc"]}, file="m.json", index=9)


def test_unknown_benchmark(tmp_path: Path) -> None:
    write_json(tmp_path / "x.json", [])
    with pytest.raises(InputError, match="unknown benchmark"):
        load_released(tmp_path, "webarena")
