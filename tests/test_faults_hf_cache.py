"""Fault suite, the user's Hugging Face cache: guardrepro only reads it unless
asked to repair it.

- A blob whose bytes fail their sha256 is named as corrupt (the expected and
  observed sha256) and kept, online or offline; ``fetch --repair`` deletes it
  and downloads it again, and refuses to delete it offline, where it could not
  be downloaded again. Before: ``fetch`` deleted it and said the cache "lacks"
  a file.
- ``lock`` of a model snapshot without ``tokenizer.json`` is refused, naming the
  file, and writes no lock.
- A hub retry warning is printed once (before: once by huggingface_hub's own
  handler, once by guardrepro's).

The cache is the fake one of ``tests/test_hf_cache.py`` (the toy checkpoint laid
out as huggingface_hub does); downloads come from a loopback hub
(``tests/loopback.py``) serving the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import HubFile, HubRepo, HubServer
from test_hf_cache import LFS, REVISION, ROOT, checkpoint_files, cli, fake_cache, write_lock

pytestmark = [pytest.mark.faults]
WEIGHTS = "model.safetensors"


def rot(snapshot: Path) -> tuple[Path, bytes]:
    """Flip one byte of the weights' blob; returns the blob and its rotten bytes."""
    blob = Path(os.path.realpath(snapshot / WEIGHTS))
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    return blob, bytes(data)


@pytest.mark.parametrize("repair", [False, True])
def test_offline_fetch_names_a_corrupt_blob_and_keeps_it(tmp_path, repair):
    snapshot = fake_cache(tmp_path / "hf" / "hub")
    blob, rotten = rot(snapshot)
    lock = write_lock(tmp_path / "toy-hub.toml")
    done = cli(tmp_path, "fetch", str(lock), "--no-progress", *(["--repair"] if repair else []))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    expected = checkpoint_files()[WEIGHTS]
    assert "corrupt" in done.stderr and WEIGHTS in done.stderr
    assert f"the cache names it sha256 {blob.name}" in done.stderr
    assert f"observed {hashlib.sha256(rotten).hexdigest()}" in done.stderr
    assert f"the lock pins sha256 {hashlib.sha256(expected).hexdigest()}" in done.stderr
    assert ("nothing was deleted" if repair else "--repair") in done.stderr
    assert "lacks" not in done.stderr
    assert blob.read_bytes() == rotten and (snapshot / WEIGHTS).is_symlink()


def test_repair_deletes_the_corrupt_blob_and_downloads_it_again(tmp_path, monkeypatch):
    import test_hf_cache

    snapshot = fake_cache(tmp_path / "hf" / "hub")
    blob, _ = rot(snapshot)
    lock = write_lock(tmp_path / "toy-hub.toml")
    files = {name: HubFile(data, lfs=name in LFS) for name, data in checkpoint_files().items()}
    with HubServer(HubRepo("Org/Toy-Guard", REVISION, files)) as server:
        monkeypatch.setattr(test_hf_cache, "dead_endpoint", lambda: server.url)
        kept = cli(tmp_path, "fetch", str(lock), "--no-progress", offline=False)
        assert kept.returncode == 2 and "corrupt" in kept.stderr, kept.stderr
        assert blob.exists()
        done = cli(tmp_path, "fetch", str(lock), "--no-progress", "--repair", offline=False)
    assert done.returncode == 0, done.stderr
    assert any(line.startswith(f"repaired   {WEIGHTS}") for line in done.stdout.splitlines())
    assert (snapshot / WEIGHTS).read_bytes() == checkpoint_files()[WEIGHTS]


def test_lock_of_a_snapshot_without_tokenizer_json_is_refused(tmp_path):
    snapshot = fake_cache(tmp_path / "hf" / "hub")
    (snapshot / "tokenizer.json").unlink()
    out = tmp_path / "snap.toml"
    for extra in ([], ["--guard", "toy-guard"]):
        done = cli(tmp_path, "lock", str(snapshot), "--out", str(out), "--no-progress", *extra)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"{snapshot}: the checkpoint lacks tokenizer.json" in done.stderr
        assert "special token" not in done.stderr and not out.exists()


RETRY = """
import logging, sys
from guardrepro import logs
logs.setup(0)
from guardrepro.artifacts.hub import _hub
_hub()
import huggingface_hub.utils._http as http  # the module whose logger warns on each retry
http.logger.warning("Retrying in 1s [Retry 1/5].")
"""


def test_a_hub_retry_is_printed_once():
    done = subprocess.run([sys.executable, "-c", RETRY], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("Retry 1/5") == 1, done.stderr
    assert "WARNING huggingface_hub.utils._http: Retrying in 1s [Retry 1/5]." in done.stderr
