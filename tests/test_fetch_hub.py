"""Hub fetch through the real huggingface_hub download path against a loopback Hub.

Each fetch runs in a subprocess whose environment points ``HF_ENDPOINT`` at the
loopback server before huggingface_hub is imported (and isolates ``HF_HOME``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from loopback import HubFile, HubRepo, HubServer, git_blob_sha1, sha

from guardrepro.artifacts.locks import load_lock
from guardrepro.artifacts.pins import with_cached_pins

REVISION = "ad2f82df3ae3e0dcdaed7b7c71e8b7f0b16ead7a"
CONFIG = b'{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 128}\n'
WEIGHTS = bytes((i * 7 + 3) % 251 for i in range(200_000))
TOKENIZER = b'{"version": "1.0", "model": {"type": "BPE"}}\n' * 50

SCRIPT = """
import json, sys
from guardrepro.artifacts.fetch import fetch_lock
try:
    out_file = sys.argv[3] if len(sys.argv) > 3 else None
    r = fetch_lock(sys.argv[1], sys.argv[2], progress=False, out=out_file)
    out = {"ok": True, "dir": str(r.directory), "updated": r.lock_updated,
           "files": [[f.path, f.sha256, f.size, f.action, f.pinned_now] for f in r.files]}
except Exception as e:
    out = {"ok": False, "type": type(e).__name__, "msg": str(e)}
print("RESULT " + json.dumps(out))
"""


def make_repo() -> HubRepo:
    return HubRepo(
        "Org/Tiny-Guard",
        REVISION,
        {
            "config.json": HubFile(CONFIG, lfs=False),
            "model.safetensors": HubFile(WEIGHTS, lfs=True),
            "tokenizer.json": HubFile(TOKENIZER, lfs=True),
        },
    )


def write_lock(path: Path, files: list[str]) -> Path:
    body = f"""# checkpoint lock for tests: list confirmed on first fetch
name = "tiny-guard"
kind = "checkpoint"

[source]
type = "hf"
repo = "Org/Tiny-Guard"
revision = "{REVISION}"
"""
    for rel in files:
        body += f'\n[[file]]\npath = "{rel}"\npinned_by = "first-download"\n'
    path.write_text(body)
    return path


def run_fetch(server: HubServer, lock: Path, home: Path, tmp_path: Path,
              hf_home: str = "hf-home", out: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(
        HF_ENDPOINT=server.url,
        HF_HOME=str(tmp_path / hf_home),
        HF_HUB_OFFLINE="0",
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONPATH=str(Path(__file__).resolve().parents[1]),
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(lock), str(home), *([str(out)] if out else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.fixture
def hub():
    with HubServer(make_repo()) as server:
        yield server


FILES = ["config.json", "model.safetensors", "tokenizer.json"]


def test_first_download_records_hub_sha256_then_refuses_mismatch(hub, tmp_path):
    lock = write_lock(tmp_path / "tiny.toml", FILES)
    result = run_fetch(hub, lock, tmp_path / "home", tmp_path)
    assert result["ok"], result
    expected = {"config.json": CONFIG, "model.safetensors": WEIGHTS, "tokenizer.json": TOKENIZER}
    assert result["files"] == [
        [rel, sha(data), len(data), "downloaded", True] for rel, data in expected.items()
    ]
    directory = Path(result["dir"])
    snapshot = tmp_path / "hf-home/hub/models--Org--Tiny-Guard/snapshots" / REVISION
    for rel, data in expected.items():
        assert (directory / rel).read_bytes() == data
        assert not (directory / rel).is_symlink()
        # stored once: the lock's directory hardlinks the HF cache's blob
        assert os.stat(directory / rel).st_ino == os.stat(snapshot / rel).st_ino
    assert not list((tmp_path / "home").glob("blobs/sha256/*"))
    before = lock.read_text()
    recorded = with_cached_pins(load_lock(lock), tmp_path / "home")  # the cache's pin file
    for rel, data in expected.items():
        entry = recorded.file(rel)
        assert (entry.sha256, entry.size, entry.pinned_by) == (
            sha(data),
            len(data),
            "first-download",
        )
        assert entry.pinned_at is not None
    assert load_lock(lock).pending  # the lock file itself is never rewritten
    # every listed file resolved (HEAD) before the first byte was downloaded
    methods = [r.method for r in hub.requests if "/resolve/" in r.path or "/cdn/" in r.path]
    assert methods[:3] == ["HEAD"] * 3
    assert any(r.path == "/cdn/model.safetensors" for r in hub.requests)

    # already cached: nothing is asked of the hub; --out writes the pinned lock to commit
    count = len(hub.requests)
    pinned = tmp_path / "pinned.toml"
    again = run_fetch(hub, lock, tmp_path / "home", tmp_path, out=pinned)
    assert again["ok"] and [f[3] for f in again["files"]] == ["cached"] * 3
    assert len(hub.requests) == count
    assert load_lock(pinned).files == recorded.files
    assert pinned.read_text().startswith("# checkpoint lock for tests")
    assert lock.read_text() == before
    lock = pinned

    # the hub now serves other weights (and says so in its LFS sha256): refused up front
    hub.repo.files["model.safetensors"] = HubFile(WEIGHTS[:-1] + b"\x00", lfs=True)
    refused = run_fetch(hub, lock, tmp_path / "fresh-home", tmp_path, "hf-2")
    assert not refused["ok"] and refused["type"] == "IntegrityError"
    assert sha(WEIGHTS) in refused["msg"] and "model.safetensors" in refused["msg"]
    assert load_lock(lock) == recorded  # pins untouched

    # a non-LFS file changes: the downloaded bytes are refused against the recorded pin
    hub.repo.files["model.safetensors"] = HubFile(WEIGHTS, lfs=True)
    changed = CONFIG.replace(b"128", b"256")  # same size, other bytes
    hub.repo.files["config.json"] = HubFile(changed, lfs=False)
    refused = run_fetch(hub, lock, tmp_path / "fresh-home-2", tmp_path, "hf-3")
    assert not refused["ok"] and refused["type"] == "IntegrityError"
    assert sha(CONFIG) in refused["msg"] and sha(changed) in refused["msg"]
    blobs = tmp_path / "hf-3/hub/models--Org--Tiny-Guard/blobs"
    assert not (blobs / git_blob_sha1(changed)).exists()  # discarded from the HF cache
    assert (blobs / sha(WEIGHTS)).is_file()


def test_hub_lacking_a_listed_file_fails_before_any_download(hub, tmp_path):
    lock = write_lock(tmp_path / "tiny.toml", [*FILES, "model-00002-of-00004.safetensors"])
    before = lock.read_text()
    result = run_fetch(hub, lock, tmp_path / "home", tmp_path)
    assert not result["ok"] and result["type"] == "FetchError"
    assert "model-00002-of-00004.safetensors" in result["msg"]
    assert "no such file" in result["msg"]
    assert not [r for r in hub.requests if r.method == "GET" and "/api/" not in r.path]
    assert lock.read_text() == before


def test_bytes_not_matching_the_hub_lfs_sha256_are_discarded(hub, tmp_path):
    hub.repo.files["model.safetensors"].advertised_sha256 = "ab" * 32
    lock = write_lock(tmp_path / "tiny.toml", FILES)
    before = lock.read_text()
    result = run_fetch(hub, lock, tmp_path / "home", tmp_path)
    assert not result["ok"] and result["type"] == "IntegrityError"
    assert "ab" * 32 in result["msg"] and sha(WEIGHTS) in result["msg"]
    assert lock.read_text() == before
    assert not (tmp_path / "home/blobs/sha256" / sha(WEIGHTS)).exists()


def test_hub_serving_another_commit_is_refused(hub, tmp_path):
    hub.repo.served_commit = "f" * 40
    lock = write_lock(tmp_path / "tiny.toml", FILES)
    result = run_fetch(hub, lock, tmp_path / "home", tmp_path)
    assert not result["ok"] and result["type"] == "IntegrityError"
    assert "f" * 40 in result["msg"] and "pinned revision" in result["msg"]


def test_failed_first_fetch_keeps_verified_lfs_blobs_for_the_retry(hub, tmp_path):
    hub.repo.files["tokenizer.json"].advertised_sha256 = "cd" * 32  # last file fails
    lock = write_lock(tmp_path / "tiny.toml", FILES)
    failed = run_fetch(hub, lock, tmp_path / "home", tmp_path)
    assert not failed["ok"] and "tokenizer.json" in failed["msg"]
    assert with_cached_pins(load_lock(lock), tmp_path / "home").pending  # nothing recorded
    hub.repo.files["tokenizer.json"].advertised_sha256 = None
    hub.requests.clear()
    result = run_fetch(hub, lock, tmp_path / "home", tmp_path)
    assert result["ok"], result
    actions = {f[0]: f[3] for f in result["files"]}
    # the verified files stayed in the HF cache: only the bad one is asked for again
    assert actions == {
        "config.json": "cached",
        "model.safetensors": "cached",
        "tokenizer.json": "downloaded",
    }
    assert not hub.requests_for("/cdn/model.safetensors")
    assert not [r for r in hub.requests if r.path.endswith("/config.json")]
    assert all(f[4] for f in result["files"])  # all three pinned now
    pins = with_cached_pins(load_lock(lock), tmp_path / "home")
    assert pins.file("model.safetensors").sha256 == sha(WEIGHTS)


def test_size_contradicting_a_cached_blob_is_a_lock_error_and_keeps_the_blob(hub, tmp_path):
    lock = write_lock(tmp_path / "tiny.toml", FILES)
    pinned = tmp_path / "pinned.toml"
    assert run_fetch(hub, lock, tmp_path / "home", tmp_path, out=pinned)["ok"]
    # the weights' sha256 is right, its size one byte short: the lock is wrong
    text = pinned.read_text().replace(f"size = {len(WEIGHTS)}\n", f"size = {len(WEIGHTS) - 1}\n")
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(text)
    assert load_lock(wrong).file("model.safetensors").size == len(WEIGHTS) - 1
    count = len(hub.requests)
    result = run_fetch(hub, wrong, tmp_path / "home-2", tmp_path)
    assert not result["ok"] and result["type"] == "LockError", result
    assert "'tiny-guard'" in result["msg"] and "model.safetensors" in result["msg"]
    assert f"size = {len(WEIGHTS) - 1}" in result["msg"] and sha(WEIGHTS) in result["msg"]
    assert len(hub.requests) == count  # refused from the cache, nothing asked of the hub
    blob = tmp_path / "hf-home/hub/models--Org--Tiny-Guard/blobs" / sha(WEIGHTS)
    assert blob.read_bytes() == WEIGHTS  # the shared blob was kept
