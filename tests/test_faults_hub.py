"""Fault suite, hub downloads: a hub whose GET body is longer than what the lock pins
and HEAD attests must not write past that size into the HF cache.

``guardrepro fetch`` runs as a subprocess (huggingface_hub's real download path) with
``HF_ENDPOINT`` at a loopback Hub (``tests/loopback.py``) whose HEAD answers tell the
true size while the GET of the weights sends more. A thread samples every file under
the HF cache while the fetch runs, so a file that grew past the size and was deleted
afterwards is still seen. Sizes come from the served bytes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from loopback import HubFile, HubRepo, HubServer, serve_bytes, serve_endless, sha

from guardrepro.artifacts.locks import load_lock
from guardrepro.artifacts.pins import with_cached_pins

pytestmark = pytest.mark.faults

ROOT = Path(__file__).resolve().parents[1]
REVISION = "ad2f82df3ae3e0dcdaed7b7c71e8b7f0b16ead7a"
CONFIG = b'{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 128}\n'
WEIGHTS = bytes((i * 7 + 3) % 251 for i in range(200_000))
BLOCK = bytes(range(256)) * 256  # 64 KiB


def write_lock(path: Path, pinned: bool, weights: bytes = WEIGHTS) -> Path:
    body = ('name = "tiny-guard"\nkind = "checkpoint"\n\n[source]\ntype = "hf"\n'
            f'repo = "Org/Tiny-Guard"\nrevision = "{REVISION}"\n')
    for rel, data in (("config.json", CONFIG), ("model.safetensors", weights)):
        pin = (f'sha256 = "{sha(data)}"\nsize = {len(data)}\n' if pinned
               else 'pinned_by = "first-download"\n')
        body += f'\n[[file]]\npath = "{rel}"\n{pin}'
    path.write_text(body)
    return path


class Sampler(threading.Thread):
    """The largest size of any file under ``root``, sampled every 5 ms until stopped."""

    def __init__(self, root: Path) -> None:
        super().__init__(daemon=True)
        self.root, self.largest, self.done = root, 0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for dirpath, _, names in os.walk(self.root):
                for name in names:
                    try:
                        size = os.lstat(os.path.join(dirpath, name)).st_size
                    except FileNotFoundError:
                        continue
                    self.largest = max(self.largest, size)
            time.sleep(0.005)


def fetch(server: HubServer, lock: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str],
                                                                   int, float]:
    """``guardrepro fetch LOCK``: (the process, the largest file seen in the HF cache,
    seconds taken)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="0",
               HF_HUB_DISABLE_TELEMETRY="1", GUARDREPRO_HOME=str(tmp_path / "home"),
               PYTHONPATH=str(ROOT))
    (tmp_path / "hf").mkdir()
    sampler = Sampler(tmp_path / "hf")
    sampler.start()
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "guardrepro", "fetch", str(lock),
                               "--no-progress"], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
    finally:
        sampler.done.set()
        sampler.join()
    return proc, sampler.largest, time.monotonic() - start


def cache_files(tmp_path: Path) -> dict[str, int]:
    root = tmp_path / "hf"
    return {str(p.relative_to(root)): p.lstat().st_size for p in root.rglob("*")
            if p.is_file() or p.is_symlink()}


def weights_left(tmp_path: Path, weights: bytes = WEIGHTS) -> list[str]:
    """Cache entries of the weights: their blob (named by the sha256), any .incomplete
    file of it, their snapshot entry. (huggingface_hub's empty inter-process lock file
    under ``.locks/`` is left by every download, good or bad, and holds no bytes.)"""
    return [name for name in cache_files(tmp_path) if "/.locks/" not in "/" + name
            and (sha(weights) in name or name.endswith("model.safetensors"))]


def repo(get: object, weights: bytes = WEIGHTS) -> HubRepo:
    return HubRepo("Org/Tiny-Guard", REVISION, {
        "config.json": HubFile(CONFIG, lfs=False),
        "model.safetensors": HubFile(weights, lfs=True, get=get),  # type: ignore[arg-type]
    })


# 200,000 bytes: refused at the first chunk; 12 MiB: huggingface_hub writes a first
# 10 MiB chunk into its .incomplete file, the second would pass the size
@pytest.mark.parametrize("size", [len(WEIGHTS), 12 << 20])
def test_endless_hub_body_stops_at_the_pinned_size(tmp_path, size):
    weights = (BLOCK * (size // len(BLOCK) + 1))[:size]
    with HubServer(repo(serve_endless(BLOCK, seconds=30), weights)) as server:
        lock = write_lock(tmp_path / "tiny.toml", pinned=True, weights=weights)
        proc, largest, took = fetch(server, lock, tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert "model.safetensors in hf://Org/Tiny-Guard@" + REVISION in proc.stderr
    assert f"the server sent more than the {size} pinned bytes" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 25  # ended by the size, not by the server's 30 s
    assert 0 < largest <= size  # never more than the size, even for a moment
    assert max(cache_files(tmp_path).values()) <= size
    assert weights_left(tmp_path, weights) == []  # nothing kept of the lying body


def test_body_longer_than_the_attested_size_pins_nothing(tmp_path):
    served = WEIGHTS + b"\0" * 70_000  # a Content-Length of 270000 where HEAD said 200000
    with HubServer(repo(serve_bytes(served))) as server:
        lock = write_lock(tmp_path / "tiny.toml", pinned=False)
        before = lock.read_text()
        proc, largest, _ = fetch(server, lock, tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert f"the server sent more than the {len(WEIGHTS)} attested bytes" in proc.stderr
    assert "model.safetensors" in proc.stderr and "Traceback" not in proc.stderr
    assert largest <= len(WEIGHTS)
    assert max(cache_files(tmp_path).values()) <= len(WEIGHTS)
    assert weights_left(tmp_path) == []
    assert lock.read_text() == before
    recorded = with_cached_pins(load_lock(lock), tmp_path / "home")
    assert recorded.file("model.safetensors").sha256 is None  # not pinned


def test_hub_body_of_the_right_size_still_downloads(tmp_path):
    # the same server path with an honest body: the bound does not stop a good download
    with HubServer(repo(serve_bytes(WEIGHTS))) as server:
        lock = write_lock(tmp_path / "tiny.toml", pinned=True)
        proc, largest, _ = fetch(server, lock, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert largest == len(WEIGHTS)
    blob = f"hub/models--Org--Tiny-Guard/blobs/{sha(WEIGHTS)}"
    assert cache_files(tmp_path)[blob] == len(WEIGHTS)
