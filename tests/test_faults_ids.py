"""Fault suite, row ids and the terminal: ids from a cohort, records or
predictions file are printable NFC text of bounded length (refused otherwise,
naming file, line and field), and whatever a verb prints from data goes
through one escaping function (``guardrepro.textsafe.shown``).

The hostile ids: ESC sequences (clear screen, recolour), U+202E (right-to-left
override), NUL, a newline followed by a forged verdict line, whitespace only,
over-long, and the NFD spelling of an NFC id.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from recordsets import grid, make_record, write_run

from guardrepro.checks.parity.compare import compare_records, format_table
from guardrepro.cli import main
from guardrepro.textsafe import MAX_ID_CHARS, id_problem, shown, shown_lines

pytestmark = [pytest.mark.faults]

FORGED = "FAKE: PASS all rows agree"
HOSTILE = {
    "esc": "b0\x1b[2J\x1b[31m",
    "rlo": "b0\u202eevil",
    "nul": "b0\x00x",
    "newline": f"b0\n{FORGED}",
    "blank": "   ",
    "long": "b" * (MAX_ID_CHARS + 1),
    "nfd": unicodedata.normalize("NFD", "caf\u00e9"),
}
RAW = ("\x1b", "\u202e", "\x00")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def assert_terminal_safe(text: str) -> None:
    assert not any(raw in text for raw in RAW), ascii(text)
    assert not any(line.startswith("FAKE") for line in text.splitlines()), text


def test_shown_escapes_every_non_printable_character():
    # expected spellings written by hand: Python's own escapes of each character
    assert shown("a\x1b[31mb") == "a\\x1b[31mb"
    assert shown("a\u202eb") == "a\\u202eb"
    assert shown("a\x00b\nc\rd\te") == "a\\x00b\\nc\\rd\\te"
    assert shown("a\u2028b\x7f\x9b") == "a\\u2028b\\x7f\\x9b"
    for fine in ("caf\u00e9", "\u6570\u636e", "../x y", "row-1:original"):
        assert shown(fine) == fine
    assert shown_lines(f"one\x1b\n{FORGED}") == f"one\\x1b\n{FORGED}"


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_ids_are_refused_by_the_rule(name):
    assert id_problem(HOSTILE[name]) is not None


def test_published_and_ordinary_ids_pass_the_rule():
    reference = Path("guardrepro/data/toy_reference/records.jsonl")
    ids = [json.loads(line)["row_id"] for line in reference.read_text().splitlines()]
    assert ids and all(len(i) == 20 and id_problem(i) is None for i in ids)
    for fine in ("caf\u00e9", "b0:original", "a b", "x" * MAX_ID_CHARS):
        assert id_problem(fine) is None


def _cohort_with_id(tmp_path: Path, bad: str) -> tuple[Path, Path]:
    bases = [(f"b{i}", "banking", float(i % 2)) for i in range(4)]
    run = write_run(tmp_path / "run", grid(bases, {"original": [0, 1, 0, 1]}))
    cohort = tmp_path / "run-cohort.jsonl"
    lines = cohort.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[2])
    row["sample"]["sample_id"] = bad
    lines[2] = json.dumps(row, ensure_ascii=False)
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run, edited


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_cohort_id_refused_naming_file_line_field(tmp_path, capsys, name):
    run, cohort = _cohort_with_id(tmp_path, HOSTILE[name])
    code, text = cli(capsys, "stats", str(run), "--cohort", str(cohort), "--replicates", "10")
    assert code == 2 and "Traceback" not in text
    assert str(cohort) in text and "line 3" in text and "'sample.sample_id'" in text
    assert_terminal_safe(text)


def test_nfc_and_nfd_spellings_cannot_be_two_rows(tmp_path, capsys):
    nfc = "caf\u00e9"
    run, cohort = _cohort_with_id(tmp_path, nfc)
    lines = cohort.read_text(encoding="utf-8").splitlines()
    row = json.loads(lines[3])
    row["sample"]["sample_id"] = unicodedata.normalize("NFD", nfc)
    lines[3] = json.dumps(row, ensure_ascii=False)
    cohort.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, text = cli(capsys, "stats", str(run), "--cohort", str(cohort), "--replicates", "10")
    assert code == 2 and "line 4" in text and "NFC" in text and "\\u0301" in text


def _runs_with_id(tmp_path: Path, bad: str) -> tuple[Path, Path]:
    bases = [(f"b{i}", "banking", float(i % 2)) for i in range(4)]
    a = write_run(tmp_path / "a", grid(bases, {"original": [0, 1, 0, 1]}), run_id="ra")
    b = write_run(tmp_path / "b", grid(bases, {"original": [1, 1, 0, 0]}), run_id="rb")
    for run in (a, b):
        path = run / "records.jsonl"
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace('"b0:original"', json.dumps(bad, ensure_ascii=False)),
                        encoding="utf-8")
    return a, b


@pytest.mark.parametrize("name", ["esc", "rlo", "nul", "newline"])
def test_compare_refuses_hostile_record_ids(tmp_path, capsys, name):
    """Before: compare printed the ids raw (ESC sequences, a forged line)."""
    a, b = _runs_with_id(tmp_path, HOSTILE[name])
    code, text = cli(capsys, "compare", str(a), str(b))
    assert code == 2 and "Traceback" not in text
    assert str(a / "records.jsonl") in text and "line 1" in text and "'row_id'" in text
    assert_terminal_safe(text)


def test_compare_table_escapes_ids_it_is_given():
    """Records made in memory (no file read) still reach the terminal escaped."""
    rows_a = {HOSTILE["newline"]: make_record("b0", "original", "d", 1.0, 0,
                                              rid=HOSTILE["newline"]),
              HOSTILE["esc"]: make_record("b1", "x\u202e", "d", 1.0, 1, rid=HOSTILE["esc"])}
    rows_b = {k: make_record("b", "original", "d", 1.0, 1 - (r.score or 0), rid=k)
              for k, r in rows_a.items()}
    table = format_table(compare_records(rows_a, rows_b, run_a="a\x1b", run_b="b"))
    assert_terminal_safe(table)
    assert "b0\\nFAKE: PASS all rows agree" in table and "b0\\x1b[2J" in table


def test_predictions_file_ids_are_checked(tmp_path, capsys):
    preds = tmp_path / "p.jsonl"
    good = {"base_sample_id": "b0", "variant": "original",
            "domain": "d", "gold_label": 1, "score": 1}
    bad = {**good, "base_sample_id": HOSTILE["esc"]}
    preds.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    code, text = cli(capsys, "stats", str(preds), "--replicates", "10")
    assert code == 2 and str(preds) in text and "line 2" in text
    assert "'base_sample_id'" in text
    assert_terminal_safe(text)


def test_error_lines_escape_paths(tmp_path, capsys):
    missing = tmp_path / f"run\x1b[2J\n{FORGED}"
    code, text = cli(capsys, "stats", str(missing))
    assert code == 2
    assert_terminal_safe(text)


def test_log_lines_on_stderr_are_escaped(capsys):
    import logging

    from guardrepro import logs

    logs.setup(0)
    capsys.readouterr()
    logging.getLogger("guardrepro.test").warning("row %s", HOSTILE["newline"] + "\x1b[2J")
    err = capsys.readouterr().err
    assert_terminal_safe(err)
    assert "row b0\\nFAKE: PASS all rows agree\\x1b[2J" in err


def test_every_verb_prints_through_the_one_escaping_function():
    """Only the boundary (``cli/__init__.py``, which escapes its ``error:`` line),
    ``options.echo`` itself and JSON writers call ``click.echo``: a verb's human
    lines go through ``options.echo`` / ``emit`` / ``say``."""
    import ast

    allowed = {"__init__.py", "options.py", "parse_cmd.py"}  # parse: JSON lines only
    offenders = []
    for path in sorted(Path("guardrepro/cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr == "echo"
                    and isinstance(node.value, ast.Name) and node.value.id == "click"
                    and path.name not in allowed):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_other_printed_names_follow_the_rule(tmp_path, capsys):
    """A cohort row's domain and a record's variant reach tables too."""
    run, cohort = _cohort_with_id(tmp_path, "b2:original")  # the id it had
    rows = [json.loads(x) for x in cohort.read_text(encoding="utf-8").splitlines()]
    rows[1]["domain"] = rows[1]["sample"]["subset"] = f"banking\n{FORGED}"
    cohort.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, text = cli(capsys, "stats", str(run), "--cohort", str(cohort), "--replicates", "10")
    assert code == 2 and "line 2" in text and "'domain'" in text
    assert_terminal_safe(text)
    a, b = _runs_with_id(tmp_path / "v", "b0:original")
    path = a / "records.jsonl"
    path.write_text(path.read_text().replace('"variant": "original"', '"variant": "o\\u001b"',
                                             1), encoding="utf-8")
    code, text = cli(capsys, "compare", str(a), str(b))
    assert code == 2 and "line 1" in text and "'variant'" in text
    assert_terminal_safe(text)
