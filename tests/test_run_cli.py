"""``guardrepro run``: summary output, exit codes, and a SIGKILLed run that resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from runner_helpers import TEMPLATE, build_diverse_tiny, write_cohort, write_profile

from guardrepro.cli import cli, main
from guardrepro.rundir.records import read_records

VOLATILE = ("created_at", "timings", "peak_memory_bytes", "run_id")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_diverse_tiny(tmp_path_factory.mktemp("cli") / "tiny")


@pytest.fixture()
def files(tiny: Path, tmp_path: Path) -> dict[str, Path]:
    template = tmp_path / "template.txt"
    template.write_text(TEMPLATE, encoding="utf-8")
    return {
        "template": template,
        "cohort": write_cohort(tmp_path / "cohort.jsonl", 5),
        "profile": write_profile(tmp_path / "p.toml", tiny, template),
    }


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, ["run", *args])


def test_help_lists_options() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for option in ("--profile", "--cohort", "--out", "--shard", "--limit"):
        assert option in result.output


def test_run_prints_summary_and_run_dir(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--profile", str(files["profile"]), "--cohort", str(files["cohort"]), "--out", str(out)]
    result = invoke(*args, "--limit", "3", "--no-progress")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == str(out.resolve())
    assert "5 rows selected" in lines[0] and "3 generated, 2 remaining" in lines[0]
    assert lines[1].startswith("status: ok ")
    result = invoke(*args, "--no-progress")
    assert "3 already done, 2 generated, 0 remaining" in result.stdout
    assert len(read_records(out)) == 5


def run_main(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``guardrepro.cli.main`` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(["run", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_errors_become_exit_codes(
    files: dict[str, Path], tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    base = ["--cohort", str(files["cohort"]), "--out", str(out), "--no-progress"]
    code, _, _ = run_main("--profile", str(files["profile"]), *base, "--limit", "1", capsys=capsys)
    assert code == 0
    other = write_profile(
        tmp_path / "q.toml", tiny, files["template"], options={"dtype": "bfloat16"}
    )
    code, _, err = run_main("--profile", str(other), *base, capsys=capsys)
    assert code == 2
    assert "provenance.backend_config.dtype: 'float32' != 'bfloat16'" in err
    typo = write_profile(tmp_path / "t.toml", tiny, files["template"], backend="hff")
    code, _, err = run_main("--profile", str(typo), *base, capsys=capsys)
    assert code == 2 and "did you mean 'hf'" in err
    code, _, err = run_main(
        "--profile", str(files["profile"]), *base, "--shard", "3/2", capsys=capsys
    )
    assert code == 2 and "shard" in err


@pytest.mark.slow  # spawns worker processes
def test_killed_run_resumes_to_the_same_records(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "template.txt"
    template.write_text(TEMPLATE, encoding="utf-8")
    n = 40
    cohort = write_cohort(tmp_path / "cohort.jsonl", n)
    profile = write_profile(
        tmp_path / "p.toml",
        tiny,
        template,
        options={"batch_size": 1},
        decoding="max_new_tokens = 24",
    )
    killed = tmp_path / "killed"
    args = ["--profile", str(profile), "--cohort", str(cohort), "--no-progress"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardrepro", "run", *args, "--out", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    records = killed / "records.jsonl"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if records.exists() and records.read_bytes().count(b"\n") >= 3:
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done_at_kill = records.read_bytes().count(b"\n")
    assert 3 <= done_at_kill < n

    code, out, err = run_main(*args, "--out", str(killed), capsys=capsys)
    assert code == 0, err
    assert f"{done_at_kill} already done, {n - done_at_kill} generated" in out
    code, out, err = run_main(*args, "--out", str(tmp_path / "fresh"), capsys=capsys)
    assert code == 0, err

    a = read_records(killed)
    b = read_records(tmp_path / "fresh")
    assert len(a) == n and len({r.row_id for r in a}) == n
    strip = [{k: v for k, v in r.to_dict().items() if k not in VOLATILE} for r in a]
    strip_b = [{k: v for k, v in r.to_dict().items() if k not in VOLATILE} for r in b]
    assert strip == strip_b
    assert json.loads((killed / "manifest.json").read_text())["run_id"] == "killed"


def test_seed_override_in_sampled_mode(
    files: dict[str, Path], tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from guardrepro.rundir.manifest import read_manifest

    sampled = write_profile(
        tmp_path / "s.toml",
        tiny,
        files["template"],
        decoding='mode = "sampled"\ntemperature = 1.0\ntop_p = 1.0\nmax_new_tokens = 4\nseed = 0',
    )
    base = ["--profile", str(sampled), "--cohort", str(files["cohort"]), "--no-progress"]
    run_a, run_b = tmp_path / "s1", tmp_path / "s2"
    code = run_main(*base, "--out", str(run_a), "--seed", "1", "--limit", "2", capsys=capsys)[0]
    assert code == 0
    assert run_main(*base, "--out", str(run_b), "--seed", "2", capsys=capsys)[0] == 0
    man_a, man_b = read_manifest(run_a), read_manifest(run_b)
    assert man_a is not None and man_b is not None
    assert man_a.provenance.decoding["seed"] == 1
    assert man_b.provenance.decoding["seed"] == 2
    assert man_a.provenance_sha256 != man_b.provenance_sha256
    # the per-attempt seeds derive from the override, not from the profile's 0
    rec_a = read_records(run_a)
    rec_b = read_records(run_b)
    assert rec_a[0].attempts[0].seed != rec_b[0].attempts[0].seed
    # same seed: the run resumes
    code, out, _ = run_main(*base, "--out", str(run_a), "--seed", "1", capsys=capsys)
    assert code == 0 and "2 already done, 3 generated" in out
    assert read_records(run_a)[:2] == rec_a
    # another seed (or none: the profile's 0) into that directory is refused
    code, _, err = run_main(*base, "--out", str(run_a), "--seed", "3", capsys=capsys)
    assert code == 2 and "provenance.decoding.seed: 1 != 3" in err
    # greedy profiles take no seed
    code, _, err = run_main(
        "--profile", str(files["profile"]), "--cohort", str(files["cohort"]),
        "--out", str(tmp_path / "g"), "--seed", "1", capsys=capsys,
    )
    assert code == 2 and "sampled decoding only" in err and str(files["profile"]) in err
    assert not (tmp_path / "g").exists()
    assert "--seed" in invoke("--help").output
