"""Fault suite, what a newcomer passes as ``--cohort``: the cohort spec instead of
the cohort it builds (the README's order invites it), another kind of file, or a
file that is not there. Each is exit 2 with a sentence that says what to do, and
``run`` says it before its heavy imports (before: 5-15 s of imports, then
``invalid JSON: Expecting value``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from guardrepro.cli import main

pytestmark = [pytest.mark.faults]
ROOT = Path(__file__).resolve().parents[1]
PROFILE = str(ROOT / "runners/toy-hf.toml")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("verb", [["run"], ["check-invariance", "--sample", "2"]])
def test_a_cohort_spec_is_named_with_the_build_command(tmp_path, capsys, verb):
    spec = ROOT / "cohorts/toy-64.toml"
    out = tmp_path / "run"
    extra = ["--out", str(out)] if verb == ["run"] else []
    code, text = cli(capsys, *verb, "--profile", PROFILE, "--cohort", str(spec), *extra)
    assert code == 2 and "Traceback" not in text and "invalid JSON" not in text
    assert f"{spec}: this is a cohort spec, not a built cohort" in text
    assert f"guardrepro cohort build {spec} --out cohort.jsonl" in text
    assert not out.exists()


def test_another_kind_of_file_is_named(tmp_path, capsys):
    code, text = cli(capsys, "run", "--profile", PROFILE, "--cohort", PROFILE, "--out",
                     str(tmp_path / "run"))
    assert code == 2 and "this is a run profile, not a cohort (JSONL rows)" in text


PROBE = """
import json, sys
from guardrepro.cli import main
code = main(["run", "--profile", sys.argv[1], "--cohort", sys.argv[2], "--out", sys.argv[3]])
heavy = [m for m in ("torch", "transformers", "guardrepro.run.pipeline", "guardrepro.run.profile")
         if m in sys.modules]
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_a_missing_cohort_is_reported_before_heavy_imports(tmp_path):
    missing = tmp_path / "nope.jsonl"
    done = subprocess.run([sys.executable, "-c", PROBE, PROFILE, str(missing),
                           str(tmp_path / "run")], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"code": 2, "heavy": []}, done.stderr
    assert f"error: {missing}: cohort file not found" in done.stderr
    assert not (tmp_path / "run").exists()
