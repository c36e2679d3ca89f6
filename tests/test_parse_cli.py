"""``guardrepro parse`` and ``guardrepro reparse`` through click."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures.released_data import (
    agentdojo_rows,
    answer,
    flat,
    guard_res_for,
    write_bench,
    write_released,
)

from guardrepro.cli import cli, main


def run_main(args: list[str], stdin: str = "") -> tuple[int, str, str]:
    """Run the console entry point (exit codes mapped) with captured streams."""
    runner = CliRunner()
    with runner.isolation(input=stdin) as (out, err, _):
        code = main(args)
        return code, out.getvalue().decode(), err.getvalue().decode()


def test_parse_writes_one_line_per_input() -> None:
    lines = [
        {"id": "a", "text": answer("yes", "no", "0.5")},
        {"id": 2, "text": answer("YES", "YES", "1.0")},
        {"id": "c", "text": answer("no", "no", "0.7")},
        {"id": "d", "text": "nothing useful"},
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    result = CliRunner().invoke(cli, ["parse", "--guard", "ts-guard"], input=stdin)
    assert result.exit_code == 0, result.output
    got = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(g["id"], g["status"], g["score"], g["error_type"]) for g in got] == [
        ("a", "ok", 0.5, None),
        (2, "ok", 1.0, None),
        ("c", "error", None, "invalid_harmfulness_rating"),
        ("d", "error", None, "missing_or_malformed_tags"),
    ]
    assert set(got[0]) == {"id", "status", "score", "error_type", "components"}
    assert got[0]["components"]["malicious_user_request"] == "yes"
    assert got[0]["components"]["harmfulness_rating"] == 0.5


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("not json", "line 2: invalid JSON"),
        ('["id", "text"]', "line 2: expected a JSON object"),
        ('{"id": "x"}', "line 2: expected exactly the keys"),
        ('{"id": "x", "text": 5}', "line 2: text must be a string"),
        ('{"id": true, "text": ""}', "line 2: id must be a string or an integer"),
        ("", "line 2: blank line"),
    ],
)
def test_parse_malformed_line_exits_2(bad: str, needle: str) -> None:
    stdin = json.dumps({"id": 1, "text": "x"}) + "\n" + bad + "\n"
    code, out, err = run_main(["parse"], stdin)
    assert code == 2
    assert needle in err and "<stdin>" in err
    assert len(out.splitlines()) == 1  # the good first line was answered


def test_parse_unknown_guard_is_a_usage_error() -> None:
    code, _, err = run_main(["parse", "--guard", "ts_guard"], "")
    assert code == 2 and "ts-guard" in err


def build(tmp_path: Path) -> None:
    files = agentdojo_rows()
    write_bench(tmp_path, files)
    answers: list[tuple[float | None, str]] = [
        (0.0, answer("no", "no", "0.0")),
        (1.0, answer("yes", "yes", "1.0")),
        (0.0, answer("no", "no", "0.5")),
        (0.5, answer("no", "yes", "0.5")),
        (None, "no tags at all"),
        (1.0, answer("no", "yes", "1.0")),
        (0.0, answer("yes", "no", "1.0")),  # re-parses to 1.0: not reproduced
        (None, answer("yes", "no", "1.0")),  # parses now although released failed
    ]
    write_released(
        tmp_path,
        "agentdojo",
        flat(files),
        [p for p, _ in answers],
        [guard_res_for(p, t) if p is not None else {"reason": t} for p, t in answers],
    )


def test_reparse_data_dir(tmp_path: Path) -> None:
    build(tmp_path)
    result = CliRunner().invoke(cli, ["reparse", str(tmp_path), "--benchmark", "agentdojo"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    rows, summary = lines[:-1], lines[-1]["summary"]
    assert [r["reproduced"] for r in rows] == [True] * 6 + [False, False]
    assert rows[6]["score"] == 1.0 and rows[6]["released_pred"] == 0.0
    assert rows[7]["status"] == "ok" and rows[7]["released_pred"] is None
    assert rows[0]["domain"] == "workspace" and rows[7]["domain"] == "banking"
    assert summary["benchmark"] == "agentdojo"
    assert (summary["reproduced"], summary["denominator"], summary["agreement"]) == (6, 8, 0.75)
    assert "6/8 rows reproduce" in result.stderr and "0.7500" in result.stderr


def test_reparse_file_paths(tmp_path: Path) -> None:
    build(tmp_path)
    base = tmp_path / "guardian_test_logs" / "agentdojo" / "TS-Guard"
    args = ["reparse", "--preds", str(base / "preds.json"), "--labels", str(base / "labels.json"),
            "--meta-data", str(base / "meta_data.json")]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[-1]["summary"]["reproduced"] == 6
    assert lines[0]["domain"] is None


def test_reparse_argument_errors(tmp_path: Path) -> None:
    build(tmp_path)
    code, _, err = run_main(["reparse", str(tmp_path)])
    assert code == 2 and "--benchmark" in err
    code, _, err = run_main(["reparse"])
    assert code == 2 and "--preds" in err
    meta = tmp_path / "guardian_test_logs" / "agentdojo" / "TS-Guard" / "meta_data.json"
    data = json.loads(meta.read_text())
    data[3]["guard_res"] = {"risk rating": 0.5, "text": "x"}
    meta.write_text(json.dumps(data))
    code, _, err = run_main(["reparse", str(tmp_path), "--benchmark", "agentdojo"])
    assert code == 2 and "row 3" in err and "['risk rating', 'text']" in err


def test_reparse_from_lock(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    entries = []
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        blob = path.read_bytes()
        entries.append(
            f'[[file]]\npath = "{path.relative_to(data).as_posix()}"\n'
            f'sha256 = "{hashlib.sha256(blob).hexdigest()}"\nsize = {len(blob)}\n'
        )
    lock = tmp_path / "released.toml"
    lock.write_text(
        'name = "released-test"\nkind = "files"\n\n[source]\ntype = "local"\npath = "data"\n\n'
        + "\n".join(entries)
    )
    args = ["reparse", "--lock", str(lock), "--benchmark", "agentdojo"]
    result = CliRunner(env={"GUARDREPRO_HOME": str(tmp_path / "home")}).invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[-1])["summary"]["reproduced"] == 6
