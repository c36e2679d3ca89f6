"""Fault suite, bytes and blobs: downloads that would fill the disk or pin the wrong
bytes, servers that hold a fetch past its deadline, bad fetch settings, and a lock
that contradicts a blob other locks share.

Each case runs ``guardrepro fetch`` (the CLI, in this process) against a real
loopback server; expected sizes and hashes come from the served bytes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import test_faults_fetch
from loopback import (
    LoopbackServer,
    serve_bytes,
    serve_encoded,
    serve_endless,
    serve_slow_headers,
    sha,
)
from test_faults_fetch import cli, media, write_lock

pytestmark = pytest.mark.faults
env = test_faults_fetch.env  # the same fixture: loopback URLs, fast retries, a fresh home

MIB = 1 << 20
BLOCK = bytes(range(256)) * 256  # 64 KiB


def _download_bytes(home: Path) -> int:
    root = home / "downloads"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def test_endless_body_never_exceeds_the_pinned_size(server, env, tmp_path, capsys):
    served = (BLOCK * 16)[:MIB]
    server.route(media("w.bin"), serve_endless(BLOCK, seconds=20))
    lock = write_lock(tmp_path / "l.toml", served)
    start = time.monotonic()
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 4, err
    assert "more than the 1048576 pinned bytes" in err and "w.bin" in err
    assert "Traceback" not in err and "slow" not in err
    assert time.monotonic() - start < 10
    assert _download_bytes(env) == 0  # nothing kept beyond the size (nothing kept at all)
    assert not (env / "blobs/sha256" / sha(served)).exists()


def test_endless_body_for_a_first_download_pin_writes_nothing(server, env, tmp_path, capsys):
    server.route(media("w.bin"), serve_endless(BLOCK, seconds=20))
    lock = write_lock(tmp_path / "l.toml", None)
    before = lock.read_text()
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 2, err
    assert "not pinned" in err and "no Content-Length" in err and "nothing was downloaded" in err
    assert lock.read_text() == before
    assert _download_bytes(env) == 0


def test_announced_length_other_than_the_pin_downloads_nothing(server, env, tmp_path, capsys):
    data = BLOCK[:5000]
    server.route(media("w.bin"), serve_bytes(data + b"x"))
    lock = write_lock(tmp_path / "l.toml", data)
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 2, err
    assert "announces 5001 bytes" in err and "pins 5000 bytes" in err and sha(data) in err
    assert _download_bytes(env) == 0


@pytest.mark.parametrize("pinned", [True, False])
def test_compressed_body_is_refused_and_never_pinned(server, env, tmp_path, capsys, pinned):
    data = b"{\"a\": 1}\n" * 500
    server.route(media("w.bin"), serve_encoded(data))
    lock = write_lock(tmp_path / "l.toml", data if pinned else None)
    before = lock.read_text()
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 4, err
    assert "Content-Encoding: gzip" in err and "w.bin" in err
    assert lock.read_text() == before
    assert _download_bytes(env) == 0
    assert not [p for p in (env / "blobs").rglob("*") if p.is_file()]


def test_headers_sent_a_byte_at_a_time_end_at_the_deadline(
    server, env, tmp_path, capsys, monkeypatch
):
    # ~240 header bytes at 0.05 s each would take 12 s; the deadline is 1.5 s
    monkeypatch.setenv("GUARDREPRO_FETCH_DEADLINE_S", "1.5")
    data = BLOCK[:300]
    server.route(media("w.bin"), serve_slow_headers(data, interval_s=0.05))
    lock = write_lock(tmp_path / "l.toml", data)
    start = time.monotonic()
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    elapsed = time.monotonic() - start
    assert code == 4, err
    assert "deadline" in err and "status line and headers had not all arrived" in err
    assert elapsed < 4, elapsed


def test_headers_slower_than_the_rate_window_are_retried_then_reported(
    server, env, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("GUARDREPRO_FETCH_RATE_WINDOW_S", "0.5")
    monkeypatch.setenv("GUARDREPRO_FETCH_RETRIES", "2")
    data = BLOCK[:300]
    server.route(media("w.bin"), serve_slow_headers(data, interval_s=0.05))
    lock = write_lock(tmp_path / "l.toml", data)
    start = time.monotonic()
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 4, err
    assert "after 2 attempts" in err and "minimum-rate window" in err
    assert time.monotonic() - start < 4
    assert len(server.requests_for(media("w.bin"))) == 2


VARIABLES = [
    "GUARDREPRO_FETCH_RETRIES",
    "GUARDREPRO_FETCH_BACKOFF_S",
    "GUARDREPRO_FETCH_TIMEOUT_S",
    "GUARDREPRO_FETCH_DEADLINE_S",
    "GUARDREPRO_FETCH_MIN_RATE_BPS",
    "GUARDREPRO_FETCH_RATE_WINDOW_S",
]


@pytest.mark.parametrize("value", ["nan", "-1", "abc", "inf"])
@pytest.mark.parametrize("name", VARIABLES)
def test_bad_fetch_setting_is_refused_naming_the_variable(
    server, env, tmp_path, capsys, monkeypatch, name, value
):
    monkeypatch.setenv(name, value)
    server.route(media("w.bin"), serve_bytes(BLOCK[:100]))
    lock = write_lock(tmp_path / "l.toml", BLOCK[:100])
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 2, err
    assert f"{name}={value!r}" in err and "Traceback" not in err
    assert server.requests_for(media("w.bin")) == []  # refused before any request


def test_zero_deadline_is_refused(server, env, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GUARDREPRO_FETCH_DEADLINE_S", "0")
    lock = write_lock(tmp_path / "l.toml", BLOCK[:100])
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 2 and "GUARDREPRO_FETCH_DEADLINE_S='0' must be greater than 0" in err


def test_lock_with_a_wrong_size_never_deletes_a_shared_blob(
    server: LoopbackServer, env, tmp_path, capsys
):
    data = BLOCK[:7000]
    server.route(media("w.bin"), serve_bytes(data))
    good = write_lock(tmp_path / "good.toml", data)
    assert cli(capsys, "fetch", str(good), "--no-progress")[0] == 0
    blob = env / "blobs/sha256" / sha(data)
    linked = env / "artifacts/faulty"
    served_before = [p for p in linked.rglob("w.bin")]
    assert blob.exists() and served_before
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace(f"size = {len(data)}", f"size = {len(data) + 1}"))
    code, _, err = cli(capsys, "fetch", str(bad), "--no-progress")
    assert code == 2, err
    assert str(bad) in err and "w.bin" in err and f"size = {len(data) + 1}" in err
    assert f"verified at {len(data)} bytes" in err
    assert blob.read_bytes() == data  # kept, and so is every hardlink to it
    assert all(p.read_bytes() == data for p in served_before)
    assert cli(capsys, "verify", str(good))[0] == 0
    assert len(server.requests_for(media("w.bin"))) == 1  # nothing downloaded again


def test_full_disk_during_a_download_names_the_part_file(server, tmp_path, capsys, monkeypatch):
    from test_faults_env import full_disk

    data = BLOCK * 32  # 2 MiB: more than the 1 MiB disk holds
    server.route(media("w.bin"), serve_bytes(data))
    monkeypatch.setenv("GUARDREPRO_GITHUB_MEDIA_URL", server.url + "/media")
    monkeypatch.setenv("GUARDREPRO_FETCH_RETRIES", "1")
    lock = write_lock(tmp_path / "l.toml", data)
    with full_disk(tmp_path / "full", leave=1 << 16) as disk:
        monkeypatch.setenv("GUARDREPRO_HOME", str(disk / "home"))
        code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 2, err
    assert "no space left on the device" in err and ".part" in err
    assert "no path reported" not in err and "Traceback" not in err
