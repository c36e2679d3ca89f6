"""``run --workers 2`` resolves the profile once, in the parent.

The counts are of real calls in every process: a profiling hook (``sys.setprofile``
matching the functions' qualified names and files; nothing is replaced) is
installed in this process and, through a ``sitecustomize`` module on the
spawned workers' ``PYTHONPATH``, in each worker; every call is appended to one
log as ``pid name``. The workers' own tokenizer loads show the hook is live
there, so their zero lock reads and verifications are measured, not assumed.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from runner_helpers import write_cohort

from guardrepro.artifacts.fetch import fetch_lock
from guardrepro.run.profile import RunProfile
from guardrepro.run.workers import run_with_workers
from guardrepro.rundir.records import read_records

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "locks/toy-guard.toml"
PROFILE = ROOT / "runners/toy-hf.toml"

PROBE = '''
import os
import sys

WATCHED = {
    ("RunProfile.from_text", "run/profile.py"): "profile",
    ("load_lock", "artifacts/locks.py"): "lock",
    ("check_lock", "artifacts/verify.py"): "verify",
    ("_checked_directory", "artifacts/fetch.py"): "materialize",
    ("cached_tree_hash", "artifacts/treehash.py"): "cached_tree_hash",
    ("tree_hash", "artifacts/treehash.py"): "tree_hash",
    ("PromptTokenizer.__init__", "run/prompts.py"): "tokenizer",
}
NAMES = {qualname.rsplit(".", 1)[-1] for qualname, _ in WATCHED}


def install(log):
    def hook(frame, event, arg):
        code = frame.f_code
        if event != "call" or code.co_name not in NAMES:
            return
        for (qualname, suffix), name in WATCHED.items():
            if code.co_qualname == qualname and code.co_filename.endswith(suffix):
                fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                os.write(fd, f"{os.getpid()} {name}\\n".encode())
                os.close(fd)

    previous = sys.getprofile()
    sys.setprofile(hook)
    return previous


if __name__ == "sitecustomize" and os.environ.get("GUARDREPRO_CALL_LOG"):
    install(os.environ["GUARDREPRO_CALL_LOG"])
'''


def _load_probe(path: Path) -> object:
    spec = importlib.util.spec_from_file_location("call_probe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # spawns worker processes
def test_two_workers_read_and_verify_the_lock_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    fetch_lock(LOCK, home, progress=False)
    cohort = write_cohort(tmp_path / "cohort.jsonl", 4)
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "sitecustomize.py").write_text(PROBE, encoding="utf-8")
    log = tmp_path / "calls.log"
    monkeypatch.setenv("GUARDREPRO_CALL_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(probe_dir), *filter(None, [os.environ.get("PYTHONPATH")])]))
    probe = _load_probe(probe_dir / "sitecustomize.py")
    previous = probe.install(str(log))  # type: ignore[attr-defined]
    try:
        profile = RunProfile.load(PROFILE)
        summary = run_with_workers(profile, cohort, tmp_path / "run", workers=2,
                                   progress=False, home=home)
    finally:
        sys.setprofile(previous)
    assert summary.generated == 4 and len(read_records(tmp_path / "run")) == 4

    calls: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in log.read_text(encoding="utf-8").splitlines():
        pid, name = line.split()
        calls[int(pid)][name] += 1
    parent = calls.pop(os.getpid())
    # the toy profile pins template and checkpoint with one lock: read once,
    # verified once (hashing its tree in full, the home being fresh), the
    # provenance's tree hash taken once from that verification, all in the
    # parent, which loads no tokenizer
    assert dict(parent) == {"profile": 1, "lock": 1, "verify": 1, "materialize": 1,
                            "tree_hash": 1, "cached_tree_hash": 1}
    assert len(calls) == 2  # two worker processes, each seen by the hook
    for worker in calls.values():
        assert dict(worker) == {"tokenizer": 1}  # no lock read, no verification


def test_a_handoff_rebuilds_without_resolving_and_refuses_a_changed_template(
    tmp_path: Path,
) -> None:
    from guardrepro.errors import PromptError
    from guardrepro.run.resolve import TemplateSource, resolve_profile
    from guardrepro.schema import sha256_text

    rule = resolve_profile(RunProfile.load(ROOT / "runners/rule-tool-lookup-toy.toml"))
    again = rule.handoff().resolve()
    assert (again.guard.name, again.template, again.tree_sha256) == (
        "rule-tool-lookup", rule.template, "none")
    assert again.runner_options["lookup_table"] == str(ROOT / "runners/toy-tool-lookup.json")

    text = "Judge {user_request} {agent_action} {env_info}\r\n"
    path = tmp_path / "template.txt"
    path.write_bytes(text.encode("utf-8"))
    as_text = TemplateSource(path, "text", sha256_text(text.replace("\r\n", "\n")))
    assert as_text.load().text.endswith("}\n")  # read as Path.read_text does
    as_bytes = TemplateSource(path, "bytes", sha256_text(text))
    assert as_bytes.load().text.endswith("\r\n")
    path.write_text("Judge {user_request} {agent_action} {env_info} (edited)\n", encoding="utf-8")
    with pytest.raises(PromptError, match="changed since it was resolved"):
        as_text.load()
