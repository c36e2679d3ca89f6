"""The user's Hugging Face cache as the store of hub checkpoints, offline.

A fake HF cache is built here from the embedded toy checkpoint the way
huggingface_hub lays one out (``blobs/<sha256>`` for LFS files, ``blobs/<git
sha1>`` for the others, ``snapshots/<rev>/<path>`` relative symlinks into
``blobs/``). ``fetch``, ``run``, ``lock <snapshot>`` and ``verify`` then run as
subprocesses with ``HF_HUB_OFFLINE=1`` and an ``HF_ENDPOINT`` nobody listens on.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from guardrepro.artifacts.locks import HfSource, load_lock

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "guardrepro" / "data" / "toy_guard"
REVISION = "0123456789abcdef0123456789abcdef01234567"
LFS = {"model.safetensors", "tokenizer.json"}


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def checkpoint_files() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(TOY.iterdir())
            if p.name not in ("TRAINING.md", "template.txt")}


def fake_cache(hub: Path) -> Path:
    """An HF cache holding Org/Toy-Guard at REVISION; returns the snapshot folder."""
    repo = hub / "models--Org--Toy-Guard"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    for name, data in checkpoint_files().items():
        blob = hashlib.sha256(data).hexdigest() if name in LFS else git_sha1(data)
        (repo / "blobs" / blob).write_bytes(data)
        (snapshot / name).symlink_to(f"../../blobs/{blob}")
    return snapshot


def dead_endpoint() -> str:
    with socket.socket() as sock:  # a port that was free a moment ago: nobody answers
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def cli(tmp_path: Path, *args: str, offline: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=dead_endpoint(),
               HF_HUB_OFFLINE="1" if offline else "0", GUARDREPRO_HOME=str(tmp_path / "home"),
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "guardrepro", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def write_lock(path: Path) -> Path:
    body = ('name = "toy-hub"\nkind = "checkpoint"\n\n[source]\ntype = "hf"\n'
            f'repo = "Org/Toy-Guard"\nrevision = "{REVISION}"\n')
    for name, data in checkpoint_files().items():
        body += (f'\n[[file]]\npath = "{name}"\nsha256 = "{hashlib.sha256(data).hexdigest()}"\n'
                 f"size = {len(data)}\n")
    path.write_text(body)
    return path


def inode(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def test_lock_of_a_snapshot_then_verify_passes(tmp_path: Path) -> None:
    snapshot = fake_cache(tmp_path / "hf" / "hub")
    out = tmp_path / "locks" / "snap.toml"
    done = cli(tmp_path, "lock", str(snapshot), "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    lock = load_lock(out)
    assert lock.source == HfSource("Org/Toy-Guard", REVISION)
    expected = {name: (hashlib.sha256(d).hexdigest(), len(d))
                for name, d in checkpoint_files().items()}
    assert {e.path: (e.sha256, e.size) for e in lock.files} == expected
    moved = tmp_path / "elsewhere" / "snap.toml"  # nothing in it is relative to its folder
    moved.parent.mkdir()
    shutil.move(out, moved)
    verified = cli(tmp_path, "verify", str(moved))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # a flipped byte in a blob fails the same verify
    blob = Path(os.path.realpath(snapshot / "config.json"))
    blob.write_bytes(blob.read_bytes().replace(b"{", b"[", 1))
    assert cli(tmp_path, "verify", str(moved)).returncode != 0


def test_symlink_leaving_the_cache_is_refused(tmp_path: Path) -> None:
    snapshot = fake_cache(tmp_path / "hf" / "hub")
    outside = tmp_path / "outside.json"
    outside.write_bytes((snapshot / "config.json").read_bytes())
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to(outside)
    done = cli(tmp_path, "lock", str(snapshot), "--out", str(tmp_path / "x.toml"))
    assert done.returncode == 2 and "outside the cache" in done.stderr, done.stderr
    fetched = cli(tmp_path, "fetch", str(write_lock(tmp_path / "toy-hub.toml")))
    assert fetched.returncode == 2 and "outside the cache" in fetched.stderr, fetched.stderr


def test_missing_file_offline_names_it(tmp_path: Path) -> None:
    snapshot = fake_cache(tmp_path / "hf" / "hub")
    (snapshot / "tokenizer.json").unlink()
    done = cli(tmp_path, "fetch", str(write_lock(tmp_path / "toy-hub.toml")))
    assert done.returncode != 0
    assert "HF_HUB_OFFLINE" in done.stderr and "tokenizer.json" in done.stderr, done.stderr


@pytest.mark.slow
def test_fetch_and_run_offline_from_the_cache_without_copying(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from guardrepro.bench.cohort.build import build_cohort_file

    snapshot = fake_cache(tmp_path / "hf" / "hub")
    lock = write_lock(tmp_path / "toy-hub.toml")
    before = lock.read_text()
    fetched = cli(tmp_path, "fetch", str(lock), "--no-progress")
    assert fetched.returncode == 0, fetched.stderr
    directory = Path(fetched.stdout.strip().splitlines()[-1].split("directory: ", 1)[1])
    for name in checkpoint_files():
        # the lock's directory links the HF blob itself: same inode, no second copy
        assert inode(directory / name) == inode(Path(os.path.realpath(snapshot / name)))
    assert not list((tmp_path / "home").glob("blobs/sha256/*"))
    assert lock.read_text() == before

    cohort = tmp_path / "cohort.jsonl"
    build_cohort_file(ROOT / "cohorts" / "toy-64.toml", ROOT / "guardrepro/data/toy_bench",
                      cohort)
    profile = (ROOT / "runners" / "toy-hf.toml").read_text()
    profile = profile.replace('template_lock = "../locks/toy-guard.toml"',
                              f'template_lock = "{ROOT / "locks" / "toy-guard.toml"}"')
    profile = profile.replace('[checkpoint]\nlock = "../locks/toy-guard.toml"',
                              f'[checkpoint]\nlock = "{lock}"')
    assert str(lock) in profile
    (tmp_path / "profile.toml").write_text(profile)
    shutil.rmtree(tmp_path / "home" / "artifacts")  # run relinks from the cache, offline
    template = cli(tmp_path, "fetch", str(ROOT / "locks" / "toy-guard.toml"), "--no-progress")
    assert template.returncode == 0, template.stderr  # the template (package lock)
    run = cli(tmp_path, "run", "--profile", "profile.toml", "--cohort", str(cohort),
              "--out", "run", "--limit", "2", "--workers", "1", "--no-progress")
    assert run.returncode == 0, run.stderr
    records = [json.loads(line) for line in (tmp_path / "run/records.jsonl").open()]
    assert len(records) == 2
    assert inode(directory / "model.safetensors") == inode(
        Path(os.path.realpath(snapshot / "model.safetensors")))
