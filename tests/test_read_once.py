"""One verb reads each file of a run once: ``gate``, ``report --html`` (with
``--split-source`` too), ``compare``, ``stats``, ``attribute`` and the audits
with ``--preds RUN_DIR``; ``gr.attribute`` and the audits' predictions of a
run already read read nothing.

A real toy run (the shipped toy guard through ``runners/toy-hf.toml`` on the
first rows of the toy cohort) is gated against a copy of its own records, then
reported with ``--html``, both in process through the CLI. The files are read
for real; a counter wrapped around the three ways a file is opened for reading
(``io.open``, which ``Path.read_bytes`` / ``read_text`` / ``open`` call, the
builtin ``open``, and ``os.open``, which ``artifacts.store.sha256_file`` calls)
only observes which paths are opened, so a file hashed and then parsed counts
twice, as it would be read twice. The split report runs on a hand-made split
(``splitsets``) and a run written over it (``recordsets``), without torch.
"""

from __future__ import annotations

import builtins
import collections
import io
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from extras import needs_matplotlib
from recordsets import grid, write_run
from splitsets import write_split

from guardrepro.artifacts.fetch import fetch_lock
from guardrepro.bench.cohort.build import build_cohort_file
from guardrepro.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASES = 2  # per gold label: 4 bases x 4 variants, 16 rows
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


def _bases(cohort: Path) -> set[str]:
    """The first BASES bases of each gold label in the cohort."""
    first: dict[int, list[str]] = {0: [], 1: []}
    for line in cohort.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        kept = first[row["original_label"]]
        if row["base_sample_id"] not in kept and len(kept) < BASES:
            kept.append(row["base_sample_id"])
    return {*first[0], *first[1]}


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real toy-guard run of 16 cohort rows, a gate spec whose reference is a
    copy of its records, and the toy home."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    base = tmp_path_factory.mktemp("read-once")
    home = base / "home"
    fetch_lock(ROOT / "locks/toy-guard.toml", home, progress=False)
    full = base / "full.jsonl"
    build_cohort_file(ROOT / "cohorts/toy-64.toml", ROOT / "guardrepro/data/toy_bench", full)
    cohort = base / "cohort.jsonl"
    lines = [line for line in full.read_bytes().splitlines(keepends=True)
             if json.loads(line)["base_sample_id"] in _bases(full)]
    cohort.write_bytes(b"".join(lines))
    run = base / "run"
    assert main(["run", "--profile", str(ROOT / "runners/toy-hf.toml"), "--cohort", str(cohort),
                 "--out", str(run), "--home", str(home), "--no-progress"]) == 0
    ref = base / "ref"
    ref.mkdir()
    shutil.copyfile(run / "records.jsonl", ref / "records.jsonl")
    originals = sum(1 for line in lines if json.loads(line)["variant"] == "original")
    spec = base / "gate.toml"
    spec.write_text(
        f'name = "read-once"\nrows = "originals"\n[reference]\ntype = "records"\n'
        f'path = "{(ref / "records.jsonl").as_posix()}"\n[thresholds]\n'
        f"expected_rows = {originals}\nmin_coverage = 0.5\nmin_strict_agreement = 0.5\n"
        "min_strict_agreement_gold_safe = 0.0\nmin_strict_agreement_gold_unsafe = 0.0\n",
        encoding="utf-8")
    return {"home": home, "cohort": cohort, "run": run, "ref": ref / "records.jsonl",
            "spec": spec}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[str]]:
    """Counts, by real path, every opening of a file for reading."""
    counts: collections.Counter[str] = collections.Counter()

    def note(file: Any, reading: bool) -> None:
        if reading and isinstance(file, str | os.PathLike):
            counts[os.path.realpath(os.fspath(file))] += 1

    def wrap_open(real: Callable[..., Any]) -> Callable[..., Any]:
        def counted(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            note(file, not any(c in mode for c in "wax+"))
            return real(file, mode, *args, **kwargs)
        return counted

    real_os_open = os.open

    def counted_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        note(path, not flags & WRITE_FLAGS)
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(io, "open", wrap_open(io.open))
    monkeypatch.setattr(builtins, "open", wrap_open(builtins.open))
    monkeypatch.setattr(os, "open", counted_os_open)
    yield counts


def count(reads: collections.Counter[str], path: Path) -> int:
    return reads[os.path.realpath(path)]


def test_gate_reads_each_file_once(toy: dict[str, Path],
                                   reads: collections.Counter[str]) -> None:
    run = toy["run"]
    assert main(["gate", str(run), "--spec", str(toy["spec"]), "--json"]) == 0
    assert count(reads, run / "records.jsonl") == 1
    assert count(reads, toy["cohort"]) == 1
    assert count(reads, run / "manifest.json") == 1
    assert count(reads, toy["ref"]) == 1  # the reference: parsed and hashed from one read
    assert count(reads, toy["spec"]) == 1


def test_gate_with_a_given_cohort_reads_it_once(toy: dict[str, Path],
                                                reads: collections.Counter[str]) -> None:
    run = toy["run"]
    assert main(["gate", str(run), "--spec", str(toy["spec"]), "--cohort", str(toy["cohort"]),
                 "--json"]) == 0
    assert count(reads, toy["cohort"]) == 1
    assert count(reads, run / "records.jsonl") == 1


def test_report_html_reads_each_file_once(toy: dict[str, Path],
                                          reads: collections.Counter[str]) -> None:
    run = toy["run"]
    assert main(["gate", str(run), "--spec", str(toy["spec"])]) == 0  # writes gate.json
    (run / "stats.json").unlink(missing_ok=True)
    reads.clear()
    assert main(["report", str(run), "--html", "--replicates", "50",
                 "--home", str(toy["home"]), "--no-progress"]) == 0
    assert (run / "report.html").is_file() and (run / "report.md").is_file()
    assert count(reads, run / "records.jsonl") == 1
    assert count(reads, toy["cohort"]) == 1
    assert count(reads, run / "manifest.json") == 1
    assert count(reads, run / "gate.json") == 1
    assert count(reads, toy["ref"]) == 1  # the drill-down's reference outputs
    assert count(reads, run / "stats.json") == 0  # computed here, written, not read back
    reads.clear()
    # stats.json now current: read once, not recomputed
    assert main(["report", str(run), "--html", "--home", str(toy["home"])]) == 0
    assert count(reads, run / "stats.json") == 1
    assert count(reads, run / "records.jsonl") == 1
    assert count(reads, toy["cohort"]) == 1


def test_compare_reads_each_run_once(toy: dict[str, Path], tmp_path: Path,
                                     reads: collections.Counter[str]) -> None:
    run = toy["run"]
    other = tmp_path / "other"
    shutil.copytree(run, other)
    reads.clear()
    assert main(["compare", str(run), str(other), "--json"]) == 0
    for side in (run, other):
        assert count(reads, side / "records.jsonl") == 1
        assert count(reads, side / "manifest.json") == 1


def test_stats_reads_each_file_once(toy: dict[str, Path], tmp_path: Path,
                                    reads: collections.Counter[str]) -> None:
    run = toy["run"]
    assert main(["stats", str(run), "--replicates", "50", "--no-progress",
                 "--out", str(tmp_path / "stats.json")]) == 0
    assert count(reads, run / "records.jsonl") == 1
    assert count(reads, toy["cohort"]) == 1
    assert count(reads, run / "manifest.json") == 1


SPLIT = [("harmful_steps", 1, "send", 1.0), ("harmful_steps", 2, "send", 1.0),
         ("benign_steps", 1, "read", 0.0), ("benign_steps", 2, "read", 0.0)]


@needs_matplotlib
def test_report_with_a_split_source_reads_the_run_once(
        tmp_path: Path, reads: collections.Counter[str]) -> None:
    """The split table takes the report's ``RunData``: the run is not read again."""
    from guardrepro.bench.released import released_dir

    split = write_split(tmp_path, "agentharm", SPLIT, [1, 1, 0, 0.5])
    run = write_run(tmp_path / "rule", grid(split.bases, {"original": [1, 0, 0, 0]}),
                    split=True)
    logs = split.root / released_dir("agentharm")
    reads.clear()
    assert main(["report", str(run), "--html", "--replicates", "20", "--no-progress",
                 "--split-source", str(logs), "--data-dir", str(split.root)]) == 0
    assert (run / "guard_splits.json").is_file() and (run / "report.html").is_file()
    assert count(reads, run / "records.jsonl") == 1
    assert count(reads, run / "manifest.json") == 1
    assert count(reads, logs / "preds.json") == 1  # the other source: read once too


def test_attribute_reads_each_run_once(toy: dict[str, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str],
                                       reads: collections.Counter[str]) -> None:
    run = toy["run"]
    quant = tmp_path / "quant"
    shutil.copytree(run, quant)
    capsys.readouterr()
    reads.clear()
    assert main(["attribute", "--reference", str(toy["ref"]), "--bf16", str(run),
                 "--quantized", str(quant), "--replicates", "20", "--json"]) == 0
    assert [r["label"] for r in json.loads(capsys.readouterr().out)["runs"]] == ["run", "quant"]
    assert count(reads, run / "records.jsonl") == 1
    assert count(reads, quant / "records.jsonl") == 1
    assert count(reads, toy["ref"]) == 1
    reads.clear()
    # one run given twice (as the reference and as --quantized) is read once
    assert main(["attribute", "--reference", str(run), "--bf16", str(toy["ref"]),
                 "--quantized", str(run / "records.jsonl"), "--replicates", "20"]) == 0
    assert count(reads, run / "records.jsonl") == 1
    assert count(reads, toy["ref"]) == 1


def test_gr_attribute_takes_runs_already_read(toy: dict[str, Path],
                                              reads: collections.Counter[str]) -> None:
    import guardrepro as gr
    from guardrepro.rundir.read import read_records_file

    run = toy["run"]
    by_paths = gr.attribute(toy["ref"], bf16=run, quantized=[toy["ref"]], replicates=20)
    data, ref = gr.read_run(run), read_records_file(toy["ref"])
    reads.clear()
    read = gr.attribute(ref, bf16=data, quantized=[ref], replicates=20)
    assert count(reads, run / "records.jsonl") == 0 and count(reads, toy["ref"]) == 0
    assert read.attrs["attribution"] == by_paths.attrs["attribution"]
    assert read.equals(by_paths)


AUDIT_ROWS = [(domain, n, tool, gold) for domain in ("workspace", "travel", "slack", "banking")
              for n, tool, gold in ((1, "toola", 1.0), (2, "toolb", 0.0))]
AUDIT_SCORES = [1, 0, 1, 1, 0.5, 0, 0]  # the eighth row has no record


def test_audits_read_the_preds_run_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        reads: collections.Counter[str]) -> None:
    from guardrepro.bench.tsbench import load_benchmark
    from guardrepro.checks.audits.benchmark import run_preds
    from guardrepro.rundir.read import load_run_data, read_records_file

    split = write_split(tmp_path, "agentdojo", AUDIT_ROWS)
    run = write_run(tmp_path / "run", grid(split.bases[:7], {"original": AUDIT_SCORES}),
                    split=True)
    for verb in (["tool-lookup"], ["association", "--replicates", "20"]):
        reads.clear()
        assert main(["audit", *verb, "--data-dir", str(split.root), "--preds", str(run),
                     "--json"]) == 0
        assert count(reads, run / "records.jsonl") == 1
    rows = load_benchmark(split.root, "agentdojo")
    data, file = load_run_data(run), read_records_file(run)
    reads.clear()
    want = ([*map(float, AUDIT_SCORES), None], {b for b, _, _ in split.bases[:7]})
    assert run_preds(rows, data) == want and run_preds(rows, file) == want
    assert count(reads, run / "records.jsonl") == 0


def test_reading_records_imports_no_guard() -> None:
    """``rundir.records`` reads a run without the guard registry; the caller's
    parser lookup is what re-checks scores (the checks pass the registry's)."""
    import subprocess
    import sys

    code = ("import sys; from guardrepro.rundir.records import read_records; "
            "n = len(read_records('guardrepro/data/toy_reference/records.jsonl')); "
            "print(n, sorted(m for m in sys.modules if m.startswith('guardrepro.guards')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split(maxsplit=1)
    assert out == ["256", "[]\n"]


def test_the_parser_lookup_refuses_a_contradicted_score(tmp_path: Path) -> None:
    from guardrepro.errors import IntegrityError
    from guardrepro.guards.registry import record_parser
    from guardrepro.rundir.records import read_records

    lines = (ROOT / "guardrepro/data/toy_reference/records.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["status"] == "ok" and first["score"] == 0.0  # the toy guard said safe
    first["score"] = 1.0  # a hand edit: the output text still parses to 0.0
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
    assert read_records(path)[0].score == 1.0  # fields only: nothing to re-parse with
    with pytest.raises(IntegrityError, match=r"line 1\b.*contradicts its own output"):
        read_records(path, parsers=record_parser)
