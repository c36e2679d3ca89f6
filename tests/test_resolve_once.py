"""A run resolves its profile once: each spec file is read and verified once.

The counts are of real calls (a ``sys.setprofile`` hook on the functions'
code objects; nothing is replaced), on the shipped toy guard through the
shipped profile, whose template and checkpoint are pinned by the same lock.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from runner_helpers import write_cohort

from guardrepro.artifacts import fetch, locks, verify
from guardrepro.artifacts.fetch import fetch_lock
from guardrepro.run.doctor import diagnose
from guardrepro.run.pipeline import run_cohort
from guardrepro.run.profile import RunProfile
from guardrepro.run.prompts import PromptTokenizer
from guardrepro.run.resolve import resolve_profile
from guardrepro.rundir.manifest import read_manifest

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "locks/toy-guard.toml"
PROFILE = ROOT / "runners/toy-hf.toml"

WATCHED: dict[CodeType, str] = {
    RunProfile.from_text.__func__.__code__: "profile",  # type: ignore[attr-defined]
    locks.load_lock.__code__: "lock",
    verify.check_lock.__code__: "verify",
    fetch._checked_directory.__code__: "materialize",
    PromptTokenizer.__init__.__code__: "tokenizer",
}


@pytest.fixture()
def calls() -> Iterator[collections.Counter[str]]:
    counter: collections.Counter[str] = collections.Counter()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in WATCHED:
            counter[WATCHED[frame.f_code]] += 1

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        yield counter
    finally:
        sys.setprofile(previous)


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    fetch_lock(LOCK, home, progress=False)
    return home


def _cohort(tmp_path: Path) -> Path:
    return write_cohort(tmp_path / "cohort.jsonl", 2)


def test_run_reads_each_spec_file_once(
    home: Path, tmp_path: Path, calls: collections.Counter[str]
) -> None:
    cohort = _cohort(tmp_path)
    calls.clear()
    summary = run_cohort(PROFILE, cohort, tmp_path / "run", limit=2, progress=False, home=home)
    assert summary.generated == 2
    # template and checkpoint share one lock file: one read, one verification
    assert dict(calls) == {"profile": 1, "lock": 1, "verify": 1, "materialize": 1,
                           "tokenizer": 1}


def test_a_resolved_profile_is_passed_down_without_rereading(
    home: Path, tmp_path: Path, calls: collections.Counter[str]
) -> None:
    cohort = _cohort(tmp_path)
    resolved = resolve_profile(RunProfile.load(PROFILE), home=home)
    after_resolve = dict(calls)
    first = run_cohort(resolved, cohort, tmp_path / "a", limit=1, progress=False)
    rest = run_cohort(resolved, cohort, tmp_path / "a", progress=False)
    other = run_cohort(resolved, cohort, tmp_path / "b", progress=False)
    assert (first.generated, rest.generated, rest.already_done, other.generated) == (1, 1, 1, 2)
    assert diagnose(resolved).to_dict() == diagnose(resolved.profile).to_dict()
    assert dict(calls) == after_resolve  # nothing re-opened after resolution
    assert after_resolve == {"profile": 1, "lock": 1, "verify": 1, "materialize": 1,
                             "tokenizer": 1}
    # same provenance as a run that resolves the profile itself
    fresh = run_cohort(PROFILE, cohort, tmp_path / "c", progress=False, home=home)
    assert fresh.generated == 2
    manifests = [read_manifest(tmp_path / d) for d in ("a", "b", "c")]
    assert len({m.provenance_sha256 for m in manifests if m is not None}) == 1
