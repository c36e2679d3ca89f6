"""Fault suite, hostile bytes: every malformed file is built here, run through the
CLI, and must end in exit 2 with the file (and line and field) named, no
traceback, and nothing written.

Covers lying safetensors headers (before any loader sees them), nesting bombs
in TOML and JSON (locks, ``parse`` lines, records fields, manifests), lone
surrogates in cohort text, non-UTF-8 names in a checkpoint directory, edited
manifests, and the empty-work refusals (0 records, no originals, unknown
variants, another cohort, ``compare`` across cohorts).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from runner_helpers import write_cohort
from test_faults_weights import TOY, cli, profile

from guardrepro.limits import MAX_NESTING

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
RULE = ROOT / "runners/rule-nuisance.toml"


def _header(path: Path) -> tuple[int, dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _write(path: Path, header: dict, data: bytes, length: int | None = None) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def _lying(kind: str, path: Path) -> str:
    """Rewrite ``path`` (a valid safetensors file) to lie in one way; the expected
    message fragment."""
    _, header, data = _header(path)
    if kind == "length 2^63":
        _write(path, header, data, length=1 << 63)
        return f"header length {1 << 63} exceeds the limit"
    if kind == "length past the end":
        text = json.dumps(header).encode()
        _write(path, header, data, length=len(text) + len(data) + 1)
        return "is larger than the"
    if kind == "offsets past the end":
        name = next(k for k in header if k != "__metadata__")
        begin, end = header[name]["data_offsets"]
        header[name]["data_offsets"] = [begin + len(data), end + len(data)]
        _write(path, header, data)
        return "run past the end of the data"
    if kind == "cut after the header":
        _write(path, header, b"")
        return "run past the end of the data"
    if kind == "not JSON":
        path.write_bytes(struct.pack("<Q", 5) + b"{nope" + data)
        return "invalid safetensors header JSON"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    ["length 2^63", "length past the end", "offsets past the end", "cut after the header",
     "not JSON"],
)
def test_lying_safetensors_header_is_named_before_any_loader(tmp_path, capsys, kind):
    pytest.importorskip("torch")
    ckpt = tmp_path / "ckpt"
    shutil.copytree(TOY, ckpt)
    says = _lying(kind, ckpt / "model.safetensors")
    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    prof = profile(tmp_path / "hf.toml", "hf", ckpt)
    code, _, err = cli(capsys, "run", "--profile", str(prof), "--cohort", str(cohort),
                       "--out", str(tmp_path / "new" / "run"), "--no-progress")
    assert code == 2, err
    assert str(ckpt / "model.safetensors") in err and says in err
    assert "Traceback" not in err and "SafetensorError" not in err
    assert not (tmp_path / "new").exists()  # no run directory, not even its parent


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_refused_run_into_an_existing_directory_touches_nothing(tmp_path, capsys):
    pytest.importorskip("torch")
    ckpt = tmp_path / "ckpt"
    shutil.copytree(TOY, ckpt)
    _lying("length past the end", ckpt / "model.safetensors")
    prof = profile(tmp_path / "hf.toml", "hf", ckpt)
    cohort = write_cohort(tmp_path / "hf-cohort.jsonl", 2)
    empty = tmp_path / "mine"
    empty.mkdir()
    (empty / "notes.txt").write_text("the user's own file\n")
    done = _rule_run(tmp_path, capsys)  # a finished run: manifest, records, lock file
    for out in (empty, done):
        before = _tree(out)
        code, _, err = cli(capsys, "run", "--profile", str(prof), "--cohort", str(cohort),
                           "--out", str(out), "--no-progress")
        assert code == 2 and "model.safetensors" in err, err
        assert _tree(out) == before  # nothing added, nothing changed or removed
    assert "records.jsonl" in _tree(done) and list(_tree(empty)) == ["notes.txt"]


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_toml_lock_is_refused(tmp_path, capsys):
    lock = tmp_path / "deep.toml"
    lock.write_text(f'name = "deep"\nkind = "files"\nx = {_nested(5000)}\n')
    code, _, err = cli(capsys, "verify", str(lock))
    assert code == 2, err
    assert str(lock) in err and f"nested deeper than {MAX_NESTING} levels" in err
    assert "RecursionError" not in err and "Traceback" not in err


def test_nesting_at_the_limit_is_read(tmp_path):
    from guardrepro.limits import load_json

    assert load_json(_nested(MAX_NESTING), file="x") is not None
    with pytest.raises(Exception, match="nested deeper"):
        load_json(_nested(MAX_NESTING + 1), file="x")
    # brackets inside strings are text, not nesting
    assert load_json(json.dumps({"t": "[" * 10_000}), file="x") == {"t": "[" * 10_000}


def test_deeply_nested_parse_line_names_its_line(tmp_path, capsys):
    src = tmp_path / "outputs.jsonl"
    src.write_text('{"id": "a", "text": "x"}\n' + _nested(100_000) + "\n")
    code, _, err = cli(capsys, "parse", "--guard", "toy-guard", "--input", str(src))
    assert code == 2, err
    assert f"{src}, line 2" in err and "nested deeper" in err and "Traceback" not in err


def test_deeply_nested_records_field_names_file_and_line(tmp_path, capsys):
    run = _rule_run(tmp_path, capsys)
    records = run / "records.jsonl"
    lines = records.read_text().splitlines()
    row = json.loads(lines[1])
    lines[1] = json.dumps(row)[:-1] + ', "components": ' + _nested(50_000) + "}"
    records.write_text("\n".join(lines) + "\n")
    code, _, err = cli(capsys, "stats", str(run))
    assert code == 2, err
    assert f"{records}, line 2" in err and "nested deeper" in err
    assert not (run / "stats.json").exists()


def _paired_cohort(path: Path, rows: int, start: int = 0) -> Path:
    """``write_cohort`` rows where each edit shares its original's domain and gold
    (as a built cohort does), so the statistics can pair them."""
    write_cohort(path, rows, start)
    out, first = [], {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        base = first.setdefault(row["base_sample_id"], row)
        row["domain"], row["original_label"] = base["domain"], base["original_label"]
        row["sample"]["subset"], row["sample"]["label"] = (base["sample"]["subset"],
                                                           base["sample"]["label"])
        out.append(json.dumps(row))
    path.write_text("\n".join(out) + "\n")
    return path


def _rule_run(tmp_path: Path, capsys, rows: int = 4) -> Path:
    cohort = _paired_cohort(tmp_path / "cohort.jsonl", rows)
    run = tmp_path / "run"
    code, _, err = cli(capsys, "run", "--profile", str(RULE), "--cohort", str(cohort),
                       "--out", str(run), "--no-progress")
    assert code == 0, err
    return run


def test_lone_surrogate_in_cohort_text_is_refused_at_read(tmp_path, capsys):
    cohort = write_cohort(tmp_path / "cohort.jsonl", 3)
    lines = cohort.read_text().splitlines()
    row = json.loads(lines[2])
    row["sample"]["history"] = "before \ud800 after"
    lines[2] = json.dumps(row)  # ensure_ascii: written as the \ud800 escape
    assert "\\ud800" in lines[2]
    cohort.write_text("\n".join(lines) + "\n")
    code, _, err = cli(capsys, "run", "--profile", str(RULE), "--cohort", str(cohort),
                       "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 2, err
    assert f"{cohort}, line 3, field 'sample.history'" in err and "lone UTF-16 surrogate" in err
    assert "UnicodeEncodeError" not in err
    assert not (tmp_path / "run").exists()


def test_paired_surrogates_are_text(tmp_path):
    from guardrepro.limits import load_json

    assert load_json('{"t": "\\ud83d\\ude00"}', file="x") == {"t": "\U0001f600"}


def test_non_utf8_file_name_in_a_checkpoint_is_named_by_lock(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    with open(os.fsencode(ckpt) + b"/bad\xff.bin", "wb") as fh:
        fh.write(b"x")
    out = tmp_path / "ckpt.toml"
    code, _, err = cli(capsys, "lock", str(ckpt), "--out", str(out), "--no-progress")
    assert code == 2, err
    assert "bad\\xff.bin" in err and "not UTF-8" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(("field", "value"), [("rows", "12x"), ("rows", -1), ("rows", 1.5)])
def test_edited_manifest_row_count_is_named(tmp_path, capsys, field, value):
    run = _rule_run(tmp_path, capsys)
    path = run / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["cohort"][field] = value
    path.write_text(json.dumps(manifest))
    code, _, err = cli(capsys, "stats", str(run))
    assert code == 2, err
    assert f"{path}, field 'cohort.{field}'" in err and "non-negative integer" in err
    assert not (run / "stats.json").exists()


def test_deeply_nested_manifest_is_refused(tmp_path, capsys):
    run = _rule_run(tmp_path, capsys)
    (run / "manifest.json").write_text('{"run_id": ' + _nested(10_000) + "}")
    code, _, err = cli(capsys, "stats", str(run))
    assert code == 2 and "nested deeper" in err and str(run / "manifest.json") in err


# ----------------------------------------------------------------- empty work


def test_stats_on_zero_records_is_an_error(tmp_path, capsys):
    run = _rule_run(tmp_path, capsys)
    (run / "records.jsonl").write_bytes(b"")
    code, _, err = cli(capsys, "stats", str(run))
    assert code == 2, err
    assert "0 records" in err and str(run / "records.jsonl") in err
    assert not (run / "stats.json").exists()


def _keep_rows(cohort: Path, drop: str | None = None, rename: tuple[str, str] | None = None
               ) -> None:
    rows = [json.loads(line) for line in cohort.read_text().splitlines()]
    rows = [r for r in rows if r["variant"] != drop]
    for row in rows:
        if rename and row["variant"] == rename[0]:
            row["variant"] = row["sample"]["segment_id"] = rename[1]
    cohort.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize(("change", "says"), [
    ({"drop": "original"}, "no 'original' rows"),
    ({"rename": ("marker_paraphrase", "mystery_edit")}, "['mystery_edit']"),
])
def test_stats_refuses_work_it_cannot_do(tmp_path, capsys, change, says):
    cohort = write_cohort(tmp_path / "cohort.jsonl", 4)  # original, marker_paraphrase, ...
    _keep_rows(cohort, **change)
    run = tmp_path / "run"
    code, _, err = cli(capsys, "run", "--profile", str(RULE), "--cohort", str(cohort), "--out",
                       str(run), "--no-progress")
    assert code == 0, err
    code, _, err = cli(capsys, "stats", str(run))
    assert code == 2, err
    assert says in err
    assert not (run / "stats.json").exists()


def test_stats_against_another_cohort_is_refused(tmp_path, capsys):
    run = _rule_run(tmp_path, capsys)
    other = write_cohort(tmp_path / "other.jsonl", 3, start=10)
    code, _, err = cli(capsys, "stats", str(run), "--cohort", str(other))
    assert code == 2, err
    assert str(other) in err and "another cohort" in err
    assert not (run / "stats.json").exists()


def test_compare_of_different_cohorts_needs_shared_rows(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    a = _rule_run(tmp_path / "a", capsys, rows=4)
    cohort_b = _paired_cohort(tmp_path / "b.jsonl", 4, start=2)  # rows 2, 3 shared
    b = tmp_path / "b"
    assert cli(capsys, "run", "--profile", str(RULE), "--cohort", str(cohort_b), "--out",
               str(b), "--no-progress")[0] == 0
    code, _, err = cli(capsys, "compare", str(a), str(b))
    assert code == 2, err
    assert "different cohorts" in err and "--shared-rows" in err
    ids_a = {json.loads(x)["sample"]["sample_id"] for x in
             (tmp_path / "a/cohort.jsonl").read_text().splitlines()}
    ids_b = {json.loads(x)["sample"]["sample_id"] for x in cohort_b.read_text().splitlines()}
    shared = len(ids_a & ids_b)
    assert shared == 2
    assert f"share {shared} row ids" in err
    code, out, err = cli(capsys, "compare", str(a), str(b), "--shared-rows")
    assert code == 0, err
    assert f"compared the {shared} rows both runs hold" in out


# ----------------------------------------------------------------- bounded work


def test_replicates_above_the_documented_maximum_are_refused(tmp_path, capsys):
    from guardrepro.limits import MAX_REPLICATES

    run = _rule_run(tmp_path, capsys)
    code, _, err = cli(capsys, "stats", str(run), "--replicates", str(10**9))
    assert code == 2, err
    assert f"1<=x<={MAX_REPLICATES}" in err
    assert not (run / "stats.json").exists()


def test_runaway_chat_template_of_an_unpinned_checkpoint_is_stopped(tmp_path, capsys,
                                                                    monkeypatch):
    pytest.importorskip("torch")
    ckpt = tmp_path / "ckpt"
    shutil.copytree(TOY, ckpt)
    config = json.loads((ckpt / "tokenizer_config.json").read_text())
    config["chat_template"] = ("{% for i in range(100000) %}{% for j in range(100000) %}"
                               "{% endfor %}{% endfor %}" + config["chat_template"])
    (ckpt / "tokenizer_config.json").write_text(json.dumps(config))
    monkeypatch.setenv("GUARDREPRO_TEMPLATE_BUDGET_S", "1")
    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    prof = profile(tmp_path / "hf.toml", "hf", ckpt)
    code, _, err = cli(capsys, "run", "--profile", str(prof), "--cohort", str(cohort),
                       "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 2, err
    assert f"{ckpt}: chat template (sha256" in err and "1 s budget" in err
    assert not (tmp_path / "run").exists()


def test_bad_template_budget_setting_is_refused(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("GUARDREPRO_TEMPLATE_BUDGET_S", "nan")
    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    prof = profile(tmp_path / "hf.toml", "hf", TOY)
    code, _, err = cli(capsys, "run", "--profile", str(prof), "--cohort", str(cohort),
                       "--out", str(tmp_path / "run"), "--no-progress")
    assert code == 2 and "GUARDREPRO_TEMPLATE_BUDGET_S='nan'" in err
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------- full disk


@pytest.mark.parametrize("verb", ["stats", "report", "report --html", "compare --out"])
def test_full_disk_names_the_file_on_every_verb(tmp_path, capsys, verb):
    import subprocess

    from test_faults_env import _mount, fill

    run = _rule_run(tmp_path, capsys)
    disk = tmp_path / "full"
    disk.mkdir()
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk))
    try:
        shutil.copytree(run, disk / "run")  # the run lives on the disk, then it fills
        fill(disk / "filler")
        if verb == "compare --out":
            args = ["compare", str(run), str(run), "--out", str(disk / "cmp.json")]
        else:
            args = [*verb.split(), str(disk / "run")]
        code, _, err = cli(capsys, *args)
        leftovers = [p.name for p in (disk / "run").iterdir() if p.name.startswith(".")]
    finally:
        subprocess.run(["umount", str(disk)], check=False)
    assert code == 2, err
    assert "no space left on the device" in err and "no path reported" not in err
    assert str(disk) in err and "Traceback" not in err
    assert leftovers == []  # no temp file left behind
