"""Fault suite, the cache: bit rot in a cached checkpoint whose mtime was put back.

Through the CLI: ``fetch`` must re-hash instead of trusting the stamp, report the
file as repaired and replace the blob and every hardlink to it; ``run`` must refuse
the artifact that ``verify`` rejects. The shipped toy guard (a package-source lock,
no network) is the checkpoint; the expected sha256 is the lock's own pin.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from runner_helpers import write_cohort

from guardrepro.artifacts.locks import load_lock
from guardrepro.cli import main

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "locks/toy-guard.toml"
PROFILE = ROOT / "runners/toy-hf.toml"
WEIGHTS = "model.safetensors"


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def flip_keep_mtime(path: Path, offset: int) -> None:
    """Flip one byte in place and put the mtime back (what bit rot looks like)."""
    st = path.stat()
    fd = os.open(path, os.O_RDWR)  # root writes the 0444 blob anyway
    try:
        byte = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([byte[0] ^ 0x01]), offset)
    finally:
        os.close(fd)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns


@pytest.fixture
def fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> dict[str, Path]:
    if os.geteuid() != 0:
        pytest.skip("flipping a byte in a read-only blob needs root (the suite runs as root)")
    home = tmp_path / "home"
    monkeypatch.setenv("GUARDREPRO_HOME", str(home))
    code, out, err = cli(capsys, "fetch", str(LOCK), "--no-progress")
    assert code == 0, err
    entry = load_lock(LOCK).file(WEIGHTS)
    assert entry.sha256 is not None
    directory = Path(out.strip().splitlines()[-1].removeprefix("directory: "))
    return {
        "home": home,
        "blob": home / "blobs/sha256" / entry.sha256,
        "linked": directory / WEIGHTS,
    }


def test_bit_rot_is_refused_by_run_and_verify_and_repaired_by_fetch(fetched, tmp_path, capsys):
    blob, linked = fetched["blob"], fetched["linked"]
    assert os.stat(blob).st_ino == os.stat(linked).st_ino  # the artifact is a hardlink
    # the middle of the file: not a sampled block, so only the ctime gives it away
    flip_keep_mtime(blob, blob.stat().st_size // 2 + 12345)

    code, _, err = cli(capsys, "verify", str(LOCK))
    assert code == 2, err

    cohort = write_cohort(tmp_path / "cohort.jsonl", 2)
    code, out, err = cli(
        capsys, "run", "--profile", str(PROFILE), "--cohort", str(cohort),
        "--out", str(tmp_path / "run"), "--no-progress",
    )  # fmt: skip
    assert code == 2, (out, err)
    assert WEIGHTS in err and "mismatch" in err and "guardrepro fetch" in err
    assert not (tmp_path / "run").exists()  # nothing generated, nothing left behind

    code, out, err = cli(capsys, "fetch", str(LOCK), "--no-progress")
    assert code == 0, err
    line = next(x for x in out.splitlines() if f" {WEIGHTS} " in x)
    assert line.startswith("repaired"), out
    assert all(x.startswith("cached") for x in out.splitlines()[:5] if WEIGHTS not in x)
    code, _, err = cli(capsys, "verify", str(LOCK))
    assert code == 0, err
    assert os.stat(fetched["blob"]).st_ino == os.stat(fetched["linked"]).st_ino


def _bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_first_fetch_does_not_hash_the_weights_again_after_linking(tmp_path, monkeypatch):
    """Linking a blob into the directory moves its ctime; fetch re-stamps the blobs it
    has just verified, so it reads each file twice (hash the package file, copy it)
    and not a third time to re-check its own hardlinks (15 GB for TS-Guard)."""
    if not Path("/proc/self/io").exists():
        pytest.skip("no /proc/self/io to count the bytes read")
    from guardrepro.artifacts.fetch import fetch_lock
    from guardrepro.artifacts.store import stamp_matches

    home = tmp_path / "home"
    total = sum(entry.size or 0 for entry in load_lock(LOCK).files)
    before = _bytes_read()
    fetch_lock(LOCK, home, progress=False)
    read = _bytes_read() - before
    assert 2 * total <= read < 3 * total, (read, total)  # two full reads + sampled blocks
    for entry in load_lock(LOCK).files:
        assert entry.sha256 is not None
        blob = home / "blobs/sha256" / entry.sha256
        assert stamp_matches(home, blob, entry.sha256, entry.size), entry.path


def test_refetch_after_deleting_a_corrupt_blob_replaces_the_old_hardlink(fetched, capsys):
    blob, linked = fetched["blob"], fetched["linked"]
    old_inode = os.stat(linked).st_ino
    flip_keep_mtime(blob, 0)
    blob.unlink()
    code, _out, err = cli(capsys, "fetch", str(LOCK), "--no-progress")
    assert code == 0, err
    assert os.stat(linked).st_ino != old_inode
    code, _, err = cli(capsys, "verify", str(LOCK))
    assert code == 0, err


def test_verify_full_catches_what_the_cheap_check_cannot(fetched, capsys, monkeypatch):
    """Corruption outside the sampled blocks with a stamp that matches the new ctime
    (what silent bit rot under an unchanged inode looks like to the cheap check):
    default fetch trusts it, which is the documented trade-off; --verify-full and
    verify read every byte and catch it."""
    from guardrepro.artifacts.store import write_stamp

    monkeypatch.setenv("GUARDREPRO_VERIFY_FULL", "0")  # restored after the test
    blob = fetched["blob"]
    entry = load_lock(LOCK).file(WEIGHTS)
    assert entry.sha256 is not None
    flip_keep_mtime(blob, blob.stat().st_size // 2 + 999)
    write_stamp(fetched["home"], blob, entry.sha256)  # the stamp now vouches for it
    code, out, _ = cli(capsys, "fetch", str(LOCK), "--no-progress")
    assert code == 0 and any(x.startswith(f"cached     {WEIGHTS}") for x in out.splitlines())
    code, _, err = cli(capsys, "verify", str(LOCK))
    assert code == 2, err
    code, out, err = cli(capsys, "fetch", str(LOCK), "--no-progress", "--verify-full")
    assert code == 0, err
    assert any(x.startswith(f"repaired   {WEIGHTS}") for x in out.splitlines()), out
    code, _, err = cli(capsys, "verify", str(LOCK))
    assert code == 0, err


def test_a_flip_inside_a_sampled_block_is_caught_even_with_a_forged_stamp(fetched, capsys):
    from guardrepro.artifacts.store import write_stamp

    blob = fetched["blob"]
    entry = load_lock(LOCK).file(WEIGHTS)
    assert entry.sha256 is not None
    write_stamp(fetched["home"], blob, entry.sha256)
    st = blob.stat()
    # rewrite the stamp's inputs except the bytes: flip in the first block, restore
    # mtime, then put a stamp whose sampled digest is the one of the good file
    import json

    stamp = fetched["home"] / f"state/verified/{st.st_dev}-{st.st_ino}.json"
    good = json.loads(stamp.read_text())
    flip_keep_mtime(blob, 10)
    good["ctime_ns"] = blob.stat().st_ctime_ns
    stamp.write_text(json.dumps(good))
    code, out, err = cli(capsys, "fetch", str(LOCK), "--no-progress")
    assert code == 0, err
    assert any(x.startswith(f"repaired   {WEIGHTS}") for x in out.splitlines()), out
