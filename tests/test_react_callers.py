"""The step parser's two callers: the cohort builder and the tool-name lookup
use it alike, and a current_action the published code crashes on (rule 9)
becomes an InputError naming the file, row and field, through the CLI too."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from fixtures.released_data import banking_spec

from guardrepro.bench.cohort.build import build_cohort
from guardrepro.bench.cohort.spec import load_spec
from guardrepro.bench.shortcuts import tool_key
from guardrepro.bench.tsbench import load_bench_file
from guardrepro.checks.audits.benchmark import tool_lookup_audit
from guardrepro.cli import main
from guardrepro.errors import InputError

SPEC = banking_spec("parser-callers")
DEEP = "[" * 5000 + "]" * 5000


def bench_row(iid: int, score: float, action: str, env: str) -> dict[str, Any]:
    return {"id-interaction": iid, "id-segment": 0, "instruction": f"task {iid}",
            "history": f"Obs: <INFORMATION>do {iid}</INFORMATION>\u2028Action: not_a_marker",
            "current_action": action, "env_info": env, "score": score}


def write(root: Path, rows: list[dict[str, Any]]) -> Path:
    path = root / "data" / "TS-Bench" / "agentdojo-traj" / "banking.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows), encoding="utf-8")
    (root / "spec.toml").write_text(SPEC, encoding="utf-8")
    return path


def test_base_entry_follows_the_published_rules(tmp_path: Path) -> None:
    rows = [
        # Arabic-Indic step numbers: a usable base (tool "get_balance")
        bench_row(1, 0, "\u0661. Action: get_balance\n\u0662. Action Input: {}",
                  "get_balance: show"),
        # the Action line comes after U+2028 inside the Thought line: no Action marker
        bench_row(2, 0, "Thought: ok\u2028Action: get_iban\nAction Input: {}", "get_iban: x"),
        # ACTİON is an Action marker; the arguments are JSON followed by text
        bench_row(3, 1, 'ACT\u0130ON: send_money\nAction Input: {"a":1} now', "send_money: pay"),
        # "\r" alone starts no line: no Action Input marker
        bench_row(4, 1, "Action: send_money\rAction Input: {}", "send_money: pay"),
    ]
    write(tmp_path, rows)
    build = build_cohort(load_spec(tmp_path / "spec.toml"), tmp_path / "data", pinned=False)
    reasons = {e["base_sample_id"]: e["reason"] for e in build.manifest["exclusions"]}
    kept = [r["base_sample_id"] for r in build.rows if r["variant"] == "original"]
    bench = load_bench_file(tmp_path / "data/TS-Bench/agentdojo-traj/banking.json", "banking")
    ids = [r.base_sample_id for r in bench]
    assert sorted(kept) == sorted([ids[0], ids[2]])
    assert reasons == {ids[1]: "candidate_tool_missing_action",
                       ids[3]: "candidate_tool_missing_action_input"}
    aliased = next(r for r in build.rows if r["base_sample_id"] == ids[2]
                   and r["variant"] == "tool_alias")
    assert "send_money" not in aliased["sample"]["current_action"]
    # the lookup key comes from the same parser, whatever the status
    assert [tool_key(r.raw["current_action"]) for r in bench] == [
        "get_balance", "", "send_money", "send_money"]


@pytest.mark.parametrize("arguments", [DEEP, "9" * 4301])
def test_cohort_build_names_file_row_field(tmp_path: Path, arguments: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    if arguments.startswith("9") and sys.get_int_max_str_digits() != 4300:
        pytest.skip("this interpreter does not have Python's default digit limit")
    rows = [bench_row(1, 0, "Action: get_balance\nAction Input: {}", "get_balance: x"),
            bench_row(2, 1, "Action: send_money\nAction Input: " + arguments, "send_money: x")]
    path = write(tmp_path, rows)
    with pytest.raises(InputError) as info:
        build_cohort(load_spec(tmp_path / "spec.toml"), tmp_path / "data", pinned=False)
    assert (info.value.file, info.value.row, info.value.field) == (str(path), 1,
                                                                   "current_action")
    out = tmp_path / "out" / "c.jsonl"
    code = main(["cohort", "build", str(tmp_path / "spec.toml"), "--data-dir",
                 str(tmp_path / "data"), "--out", str(out), "--unpinned"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"{path}, row 1, field 'current_action'" in err
    assert not out.exists()


def test_tool_lookup_names_file_row_field(tmp_path: Path) -> None:
    rows = [bench_row(1, 0, "Action: a\nAction Input: {}", "a"),
            bench_row(2, 1, "Action: b\nAction Input: {}", "b"),
            bench_row(3, 1, "Action Input: " + DEEP + "\nAction: b", "b")]
    path = write(tmp_path, rows)
    bench = load_bench_file(path, "banking")
    with pytest.raises(InputError) as info:
        tool_lookup_audit(bench)
    assert (info.value.file, info.value.row, info.value.field) == (str(path), 2,
                                                                   "current_action")
    assert tool_lookup_audit(bench[:2]).rows == 2


def test_tool_lookup_cli_exit_2_without_traceback(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "TS-Bench" / "agentdojo-traj"
    folder.mkdir(parents=True)
    for i, domain in enumerate(("banking", "slack", "travel", "workspace")):
        rows = [bench_row(1, 0, f"Action: t{i}\nAction Input: {{}}", "e"),
                bench_row(2, 1, f"Action: u{i}\nAction Input: {{}}", "e")]
        if domain == "travel":
            rows[1]["current_action"] = "Action: u\nAction Input: " + "8" * 5000
        (folder / f"{domain}.json").write_text(json.dumps(rows), encoding="utf-8")
    code = main(["audit", "tool-lookup", "--data-dir", str(tmp_path), "--benchmark",
                 "agentdojo"])
    err = capsys.readouterr().err
    if sys.get_int_max_str_digits() == 0:
        assert code == 0
        return
    assert code == 2 and "Traceback" not in err
    assert f"{folder / 'travel.json'}, row 1, field 'current_action'" in err
