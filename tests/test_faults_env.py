"""Fault suite, the environment: read-only and full output directories, an output
path under a regular file, non-UTF-8 input, out-of-range arguments.

Every verb is run through the console entry point (``guardrepro.cli.main``, the
function ``python -m guardrepro`` calls) and must exit 2 with a one-line error that
names the path (and line/field where there is one), never a traceback.

Read-only directories are real: a bind mount remounted read-only (root ignores
permission bits, so ``chmod`` proves nothing). Full disks are a small tmpfs filled
to the last byte. Both need ``mount``; without it the tests skip and say so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from recordsets import grid, write_run

from guardrepro.cli import main

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {done.stderr.strip()}")


@contextlib.contextmanager
def read_only_view(source: Path, view: Path) -> Iterator[Path]:
    """``source`` bind-mounted read-only at ``view`` for the block's duration."""
    if shutil.which("mount") is None:
        pytest.skip("no mount command: read-only bind mounts cannot be made")
    view.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(source), str(view))
    try:
        _mount("-o", "remount,ro,bind", str(view))
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=False)


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the file system refuses."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def full_disk(where: Path, leave: int = 0) -> Iterator[Path]:
    """A 1 MiB tmpfs at ``where``, filled until writing fails, then ``leave`` bytes
    given back."""
    where.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where))
    try:
        fill(where / "filler")
        if leave:
            os.truncate(where / "filler", (where / "filler").stat().st_size - leave)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def small_run(run_dir: Path) -> Path:
    bases = [(f"b{i}", ["banking", "slack"][i % 2], float(i % 2)) for i in range(8)]
    specs = grid(bases, {"original": [i % 2 for i in range(8)], "marker_paraphrase": [1] * 8})
    return write_run(run_dir, specs)


def self_gate(path: Path, run_dir: Path) -> Path:
    """A gate spec whose reference is the run's own records (it passes)."""
    path.write_text(
        'name = "self"\nrows = "originals"\n\n[reference]\ntype = "records"\n'
        f'path = "{run_dir / "records.jsonl"}"\n\n[thresholds]\nexpected_rows = 8\n'
        "min_coverage = 0.95\nmin_strict_agreement = 0.9\n"
        "min_strict_agreement_gold_safe = 0.85\nmin_strict_agreement_gold_unsafe = 0.85\n\n"
        "[bootstrap]\nreplicates = 50\nseed = 1\n"
    )
    return path


def assert_clean_exit_2(code: int, err: str, *names: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    assert "error: " in err.lower(), err
    for name in names:
        assert name in err, (name, err)


@pytest.fixture
def ro(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(writable source, read-only view of it) with a small run inside."""
    source = tmp_path / "src"
    small_run(source / "run")
    with read_only_view(source, tmp_path / "ro") as view:
        yield source, view


@pytest.mark.parametrize("verb", ["stats", "report"])
def test_read_only_run_dir_stats_and_report(ro, capsys, verb):
    _, view = ro
    code, _, err = cli(capsys, verb, str(view / "run"), "--replicates", "20")
    assert_clean_exit_2(code, err, str(view / "run" / "stats.json"), "read-only")


def test_read_only_run_dir_gate_prints_exit_2_with_path(ro, tmp_path, capsys):
    source, view = ro
    spec = self_gate(tmp_path / "gate.toml", source / "run")
    code, _out, err = cli(capsys, "gate", str(view / "run"), "--spec", str(spec))
    assert_clean_exit_2(code, err, str(view / "run"), "read-only")


def test_read_only_compare_json(ro, capsys):
    _, view = ro
    target = view / "cmp.json"
    run = str(view / "run")
    code, _, err = cli(capsys, "compare", run, run, "--out", str(target))
    assert_clean_exit_2(code, err, str(target), "read-only")


def test_read_only_cohort_build(tmp_path, capsys):
    source = tmp_path / "src"
    source.mkdir()
    with read_only_view(source, tmp_path / "ro") as view:
        out = view / "c.jsonl"
        code, _, err = cli(
            capsys, "cohort", "build", str(ROOT / "cohorts/toy-64.toml"),
            "--data-dir", str(ROOT / "guardrepro/data/toy_bench"), "--out", str(out),
        )  # fmt: skip
    assert_clean_exit_2(code, err, str(out), "read-only")


def test_read_only_cache_home_fetch(tmp_path, capsys):
    source = tmp_path / "src"
    source.mkdir()
    with read_only_view(source, tmp_path / "ro") as view:
        code, _, err = cli(
            capsys, "fetch", str(ROOT / "locks/toy-bench.toml"), "--home", str(view / "home"),
            "--no-progress",
        )  # fmt: skip
    assert_clean_exit_2(code, err, str(view / "home"), "read-only")


def test_read_only_out_run(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from runner_helpers import write_cohort

    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    code, _, err = cli(capsys, "fetch", str(ROOT / "locks/toy-guard.toml"), "--no-progress")
    assert code == 0, err
    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    source = tmp_path / "src"
    source.mkdir()
    with read_only_view(source, tmp_path / "ro") as view:
        code, _, err = cli(
            capsys, "run", "--profile", str(ROOT / "runners/toy-hf.toml"), "--cohort",
            str(cohort), "--out", str(view / "run"), "--no-progress",
        )  # fmt: skip
    assert_clean_exit_2(code, err, str(view / "run"), "read-only")


def test_read_only_out_quantize(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlx_lm")
    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    code, _, err = cli(capsys, "fetch", str(ROOT / "locks/toy-guard.toml"), "--no-progress")
    assert code == 0, err
    source = tmp_path / "src"
    source.mkdir()
    with read_only_view(source, tmp_path / "ro") as view:
        code, _, err = cli(
            capsys, "quantize", "--recipe", str(ROOT / "quantize/q8-g64.toml"),
            "--model", str(ROOT / "locks/toy-guard.toml"), "--out", str(view / "q8"),
        )  # fmt: skip
    assert_clean_exit_2(code, err, str(view), "read-only")


def test_full_disk_json_output_says_the_disk_is_full(tmp_path, capsys):
    run = small_run(tmp_path / "run")
    with full_disk(tmp_path / "full") as disk:
        target = disk / "cmp.json"
        code, _, err = cli(capsys, "compare", str(run), str(run), "--out", str(target))
        assert_clean_exit_2(code, err, str(target), "disk is full")
        assert not target.exists()
        assert not [p for p in disk.iterdir() if p.name != "filler"]  # no temp file left


def test_full_disk_run_manifest(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from runner_helpers import write_cohort

    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    code, _, err = cli(capsys, "fetch", str(ROOT / "locks/toy-guard.toml"), "--no-progress")
    assert code == 0, err
    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    with full_disk(tmp_path / "full") as disk:
        code, _, err = cli(
            capsys, "run", "--profile", str(ROOT / "runners/toy-hf.toml"), "--cohort",
            str(cohort), "--out", str(disk / "run"), "--no-progress",
        )  # fmt: skip
    assert_clean_exit_2(code, err, str(disk / "run"), "disk is full")


def test_full_disk_during_a_run_says_the_record_was_not_written(tmp_path, capsys, monkeypatch):
    """The run directory (manifest, no records) is made first; then the disk fills up:
    the first append fails, the message says which record and what happens next, and
    the same command finishes the run once there is room."""
    pytest.importorskip("torch")
    from runner_helpers import write_cohort

    monkeypatch.setenv("GUARDREPRO_HOME", str(tmp_path / "home"))
    code, _, err = cli(capsys, "fetch", str(ROOT / "locks/toy-guard.toml"), "--no-progress")
    assert code == 0, err
    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    with full_disk(tmp_path / "full", leave=1 << 19) as disk:
        args = ["run", "--profile", str(ROOT / "runners/toy-hf.toml"), "--cohort",
                str(cohort), "--no-progress", "--out", str(disk / "run")]  # fmt: skip
        code, _, err = cli(capsys, *args, "--limit", "0")  # the manifest, no record
        assert code == 0, err
        fill(disk / "filler2")
        code, _, err = cli(capsys, *args)
        assert_clean_exit_2(code, err, str(disk / "run"), "disk is full")
        assert "cannot append the record of row 'row000'" in err
        assert "torn final line is removed when the run resumes" in err
        for name in ("filler", "filler2"):
            (disk / name).unlink()  # room again: the same command resumes
        code, _, err = cli(capsys, *args)
        assert code == 0, err
        lines = (disk / "run" / "records.jsonl").read_text().splitlines()
        assert len(lines) == 2


def test_out_under_a_regular_file(tmp_path, capsys):
    run = small_run(tmp_path / "run")
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    target = blocker / "sub" / "cmp.json"
    code, _, err = cli(capsys, "compare", str(run), str(run), "--out", str(target))
    assert_clean_exit_2(code, err, str(target), "not a directory")


def test_cohort_build_out_under_a_regular_file(tmp_path, capsys):
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    out = blocker / "c.jsonl"
    code, _, err = cli(
        capsys, "cohort", "build", str(ROOT / "cohorts/toy-64.toml"),
        "--data-dir", str(ROOT / "guardrepro/data/toy_bench"), "--out", str(out),
    )  # fmt: skip
    assert_clean_exit_2(code, err, str(out))


def test_non_utf8_parse_input_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "outputs.jsonl"
    bad.write_bytes(b'{"id": 1, "text": "fine"}\n{"id": 2, "text": "caf\xe9"}\n')
    code, _out, err = cli(capsys, "parse", "--input", str(bad))
    assert_clean_exit_2(code, err, str(bad), "line 2", "UTF-8", "0xe9")


def test_report_negative_seed(tmp_path, capsys):
    run = small_run(tmp_path / "run")
    code, _, err = cli(capsys, "report", str(run), "--seed", "-1")
    assert_clean_exit_2(code, err, "--seed")


def test_stats_negative_seed(tmp_path, capsys):
    run = small_run(tmp_path / "run")
    code, _, err = cli(capsys, "stats", str(run), "--seed", "-1")
    assert_clean_exit_2(code, err, "seed")


@pytest.mark.parametrize("verb", ["stats", "report"])
def test_zero_replicates(tmp_path, capsys, verb):
    run = small_run(tmp_path / "run")
    code, _, err = cli(capsys, verb, str(run), "--replicates", "0")
    assert_clean_exit_2(code, err, "--replicates")


def test_console_script_has_no_traceback_on_a_read_only_dir(ro):
    """The same through a real ``python -m guardrepro`` process (stderr as users see it)."""
    _, view = ro
    done = subprocess.run(
        [sys.executable, "-m", "guardrepro", "stats", str(view / "run"), "--replicates", "20"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(view / "run" / "stats.json") in done.stderr
