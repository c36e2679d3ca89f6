"""Fault suite, planted symlinks: no write leaves the output directory.

A symlink is planted at each path a writing verb uses (a file or a directory on
the way, pointing at a file or folder outside the output directory), the verb
runs through the CLI, and nothing outside may change. A link at a name that is
written whole (stats.json, report.md, a manifest, a compare --out file) is
replaced by the atomic rename; a link at an append-only file (records, the
lock, run.log) or at a directory on the way is refused, naming it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from test_faults_input import _paired_cohort
from test_faults_weights import cli

from guardrepro.artifacts.nofollow import make_dirs, open_file, refuse_links
from guardrepro.artifacts.store import atomic_write_bytes
from guardrepro.errors import OutputError

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
RULE = ROOT / "runners/rule-nuisance.toml"
PRECIOUS = b"a user's file outside the output directory\n"


def _outside(tmp_path: Path) -> Path:
    """A user's folder outside the output: a file, a folder holding one, an empty folder."""
    outside = tmp_path / "outside"
    (outside / "folder").mkdir(parents=True)
    (outside / "empty").mkdir()
    (outside / "victim").write_bytes(PRECIOUS)
    (outside / "folder" / "kept").write_bytes(PRECIOUS)
    return outside


def _snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's sha256, a directory's marker."""
    seen = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        seen[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def _plant(link: Path, outside: Path, kind: str) -> None:
    """A link at ``link`` to the outside file (``file``), folder (``dir``) or
    empty folder (``empty``)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside / {"file": "victim", "dir": "folder", "empty": "empty"}[kind])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a finished 6-row rule run, its cohort), copied by each test that needs one."""
    from guardrepro.cli import main

    base = tmp_path_factory.mktemp("symlinks")
    cohort = _paired_cohort(base / "cohort.jsonl", 6)
    assert main(["run", "--profile", str(RULE), "--cohort", str(cohort), "--out",
                 str(base / "run"), "--no-progress"]) == 0
    return base / "run", cohort


# (verb, the planted path relative to the work folder, a link to a file or a dir,
#  "refused" (exit 2 naming it) or "replaced" (exit 0, now a regular file))
CASES = [
    ("run", "run/records.jsonl", "file", "refused"),
    ("run", "run/records.jsonl.lock", "file", "refused"),
    ("run", "run/run.log", "file", "refused"),
    ("run", "run/manifest.json", "file", "refused"),
    ("run --workers 2", ".run.workers", "dir", "refused"),
    ("run --workers 2", ".run.workers/1-of-2", "dir", "refused"),
    ("run --workers 2", ".run.workers/2-of-2/run", "dir", "refused"),
    ("run --workers 2", ".run.workers/1-of-2/run/records.jsonl", "file", "refused"),
    ("run --workers 2", ".run.workers/run.log", "file", "refused"),
    ("resume", "run/records.jsonl", "file", "refused"),
    ("resume", "run/run.log", "file", "refused"),
    ("resume", "run/records.jsonl.lock", "file", "refused"),
    ("stats", "run/stats.json", "file", "replaced"),
    ("report", "run/report.md", "file", "replaced"),
    ("report", "run/flip_rates.png", "file", "replaced"),
    ("compare", "cmp.json", "file", "replaced"),
]


def _command(verb: str, work: Path, cohort: Path) -> list[str]:
    run = str(work / "run")
    if verb.startswith("run") or verb == "resume":
        extra = ["--workers", "2"] if "--workers" in verb else []
        return ["run", "--profile", str(RULE), "--cohort", str(cohort), "--out", run,
                "--no-progress", *extra]
    if verb == "stats":
        return ["stats", run, "--replicates", "100"]
    if verb == "report":
        return ["report", run, "--replicates", "100"]
    if verb == "compare":
        return ["compare", run, run, "--out", str(work / "cmp.json")]
    return ["merge", run, "--out", str(work / "merged")]


@pytest.mark.parametrize(("verb", "planted", "kind", "outcome"), CASES,
                         ids=[f"{v}:{p}" for v, p, _, _ in CASES])
def test_a_planted_symlink_is_never_written_through(verb, planted, kind, outcome, tmp_path,
                                                     capsys, finished_run):
    outside = _outside(tmp_path)
    before = _snapshot(outside)
    work = tmp_path / "work"
    work.mkdir()
    run, cohort = finished_run
    if verb not in ("run", "run --workers 2"):
        shutil.copytree(run, work / "run")
        if verb == "resume":  # a resumed run whose last record was lost
            records = work / "run" / "records.jsonl"
            records.write_bytes(b"".join(records.read_bytes().splitlines(True)[:-1]))
    link = work / planted
    if link.is_symlink() or link.exists():
        link.unlink()
    _plant(link, outside, kind)
    code, _, err = cli(capsys, *_command(verb, work, cohort))
    assert _snapshot(outside) == before, err
    if outcome == "refused":
        assert code == 2, err
        assert f"{link}: it is a symbolic link" in err, err
        assert "Traceback" not in err
    else:
        assert code == 0, err
        assert link.is_file() and not link.is_symlink()


# --- the helper itself (guardrepro/artifacts/nofollow.py) ---------------------------------


def test_open_file_refuses_a_link_at_the_file_and_at_every_directory_below_trusted(tmp_path):
    outside = _outside(tmp_path)
    trusted = tmp_path / "out"
    (trusted / "a").mkdir(parents=True)
    (trusted / "a" / "b").symlink_to(outside / "folder")
    with pytest.raises(OutputError, match=r"out/a/b: it is a symbolic link"):
        open_file(trusted / "a" / "b" / "c" / "f", os.O_WRONLY | os.O_CREAT, trusted=trusted)
    (trusted / "a" / "f").symlink_to(outside / "victim")
    with pytest.raises(OutputError, match=r"out/a/f: it is a symbolic link"):
        open_file(trusted / "a" / "f", os.O_WRONLY | os.O_APPEND)
    with pytest.raises(OutputError, match="a/b: it is a symbolic link"):
        make_dirs(trusted / "a" / "b" / "new", trusted=trusted)
    with pytest.raises(OutputError, match="a/b: it is a symbolic link"):
        refuse_links(trusted / "a" / "b" / "new", trusted=trusted)
    with pytest.raises(OutputError, match="not inside"):
        open_file(tmp_path / "elsewhere", os.O_WRONLY | os.O_CREAT, trusted=trusted)
    assert _snapshot(outside) == {"empty": "dir", "folder": "dir",
                                  "folder/kept": _sha(PRECIOUS), "victim": _sha(PRECIOUS)}


def test_a_symlink_above_trusted_is_the_users_choice_and_is_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "chosen").symlink_to(real)
    fd = open_file(tmp_path / "chosen" / "sub" / "f", os.O_WRONLY | os.O_CREAT,
                   trusted=tmp_path / "chosen")
    os.write(fd, b"x")
    os.close(fd)
    assert (real / "sub" / "f").read_bytes() == b"x"


def test_atomic_writer_replaces_a_final_link_and_refuses_one_on_the_way(tmp_path):
    outside = _outside(tmp_path)
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "sub" / "stats.json").symlink_to(outside / "victim")
    atomic_write_bytes(out / "sub" / "stats.json", b"{}\n", trusted=out)
    assert (out / "sub" / "stats.json").read_bytes() == b"{}\n"
    assert not (out / "sub" / "stats.json").is_symlink()
    (out / "linked").symlink_to(outside / "folder")
    with pytest.raises(OutputError, match="out/linked: it is a symbolic link"):
        atomic_write_bytes(out / "linked" / "x.json", b"{}\n", trusted=out)
    assert (outside / "victim").read_bytes() == PRECIOUS
    assert sorted(p.name for p in (outside / "folder").iterdir()) == ["kept"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("planted", ["runs", "runs/rule-nuisance", "rules"])
def test_a_sweep_folder_planted_as_a_link_is_refused(planted, tmp_path):
    """A sweep's rule configuration (the part of ``sweep`` that runs without MLX):
    a link at ``runs/``, at its run folder or at ``rules/`` is refused."""
    from test_sweep import REPO, RULES, _spec

    from guardrepro.experiments import sweep
    from guardrepro.experiments.spec import load_sweep

    outside = _outside(tmp_path)
    before = _snapshot(outside)
    recipe = f'[[recipe]]\nrecipe = "{REPO / "quantize/q8-g64.toml"}"\n'  # not run here
    spec = load_sweep(_spec(tmp_path, recipes=recipe + RULES, limit=4))
    out, home = tmp_path / "out", tmp_path / "home"
    cohort = sweep._cohort(spec, out, home)
    _plant(out / planted, outside, "dir")
    result = sweep.SweepResult(out=out, device="test")
    with pytest.raises(OutputError, match=f"{out / planted}: it is a symbolic link"):
        sweep._rule_config(spec.rules[0], spec, out, cohort, home, result, progress=False)
    assert _snapshot(outside) == before


def test_the_local_rays_folder_planted_as_a_link_is_refused(tmp_path, capsys, finished_run):
    """``<run>/.ray`` (used when its path leaves room for Ray's sockets: a short one)."""
    pytest.importorskip("ray")
    outside = _outside(tmp_path)
    before = _snapshot(outside)
    short = Path(tempfile.mkdtemp(prefix="gr-", dir="/tmp"))
    try:
        run = short / "run"
        _plant(run / ".ray", outside, "dir")
        code, _, err = cli(capsys, "run", "--profile", str(RULE), "--cohort",
                           str(finished_run[1]), "--out", str(run), "--engine", "ray",
                           "--no-progress")
        assert code == 2 and f"{run / '.ray'}: it is a symbolic link" in err, err
    finally:
        shutil.rmtree(short)
    assert _snapshot(outside) == before
