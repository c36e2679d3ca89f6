"""Fault suite, downloads: each case runs ``guardrepro fetch`` (the CLI) against a real
loopback server that misbehaves in one way, and checks the exit code, the message,
the lock file and the cache.

Expected values come from the served bytes themselves (their sha256 computed here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loopback import (
    LoopbackServer,
    fail_then,
    serve_bad_range,
    serve_bytes,
    serve_changing,
    serve_no_length,
    serve_racing,
    serve_trickle,
    serve_truncated,
    sha,
)

from guardrepro.artifacts.locks import load_lock
from guardrepro.artifacts.pins import with_cached_pins
from guardrepro.cli import main

pytestmark = pytest.mark.faults

REPO = "someone/faulty"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD = bytes(range(256)) * 64  # 16 KiB
NEW = bytes(reversed(range(256))) * 64
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def env(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("GUARDREPRO_GITHUB_MEDIA_URL", server.url + "/media")
    monkeypatch.setenv("GUARDREPRO_GITHUB_RAW_URL", server.url + "/raw")
    monkeypatch.setenv("GUARDREPRO_FETCH_RETRIES", "3")
    monkeypatch.setenv("GUARDREPRO_FETCH_BACKOFF_S", "0.01")
    monkeypatch.setenv("GUARDREPRO_FETCH_TIMEOUT_S", "5")
    home = tmp_path / "home"
    monkeypatch.setenv("GUARDREPRO_HOME", str(home))
    return home


def media(path: str) -> str:
    return f"/media/{REPO}/{COMMIT}/{path}"


def write_lock(path: Path, data: bytes | None, rel: str = "w.bin") -> Path:
    pin = (
        'pinned_by = "first-download"\n'
        if data is None
        else f'sha256 = "{sha(data)}"\nsize = {len(data)}\n'
    )
    path.write_text(
        f'name = "faulty"\nkind = "files"\n\n[source]\ntype = "github"\nrepo = "{REPO}"\n'
        f'commit = "{COMMIT}"\n\n[[file]]\npath = "{rel}"\nlfs = true\n{pin}'
    )
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the console entry point in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_persistent_500_says_what_the_server_did_and_exits_4(server, env, tmp_path, capsys):
    server.route(media("w.bin"), fail_then(serve_bytes(OLD), failures=100))
    lock = write_lock(tmp_path / "l.toml", OLD)
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 4, err
    assert "HTTP 500" in err and "after 3 attempts" in err
    assert "size mismatch" not in err and "Traceback" not in err


def test_body_of_unattested_length_is_not_pinned(server, env, tmp_path, capsys):
    server.route(media("w.bin"), serve_no_length(OLD[:5000]))
    lock = write_lock(tmp_path / "l.toml", None)
    before = lock.read_text()
    code, out, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 2, (out, err)
    assert "w.bin" in err and "not pinned" in err and "no Content-Length" in err
    assert lock.read_text() == before  # still pending
    assert not (env / "blobs/sha256" / sha(OLD[:5000])).exists()
    assert "pinned now" not in out


def test_body_with_content_length_is_pinned(server, env, tmp_path, capsys):
    server.route(media("w.bin"), serve_bytes(OLD))
    lock = write_lock(tmp_path / "l.toml", None)
    code, out, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 0, err
    assert "pinned now" in out
    assert load_lock(lock).file("w.bin").pending  # the lock file is never rewritten
    entry = with_cached_pins(load_lock(lock), env).file("w.bin")  # the cache's pin
    assert (entry.sha256, entry.size) == (sha(OLD), len(OLD))


def test_resume_across_a_server_change_restarts_with_if_range(server, env, tmp_path, capsys):
    server.route(media("w.bin"), serve_changing(OLD, NEW, cut=3000))
    lock = write_lock(tmp_path / "l.toml", None)
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 0, err
    requests = server.requests_for(media("w.bin"))
    assert len(requests) == 2
    assert requests[1].headers.get("Range") == "bytes=3000-"
    assert requests[1].headers.get("If-Range") == '"v1"'
    entry = with_cached_pins(load_lock(lock), env).file("w.bin")
    # the pin is the new file, not OLD[:3000] + NEW[3000:]
    assert (entry.sha256, entry.size) == (sha(NEW), len(NEW))
    assert sha(OLD[:3000] + NEW[3000:]) != sha(NEW)


def test_pinned_resume_after_a_server_change_restarts_whole(server, env, tmp_path, capsys):
    # a pinned file: the If-Range validator v1 is stale, so the server sends it all again
    server.route(media("w.bin"), serve_changing(NEW, NEW, cut=3000))
    lock = write_lock(tmp_path / "l.toml", NEW)
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    # v1 != v2 so the server answers 200 with the whole file; the bytes are right
    assert code == 0, err
    assert (env / "blobs/sha256" / sha(NEW)).read_bytes() == NEW


def test_wrong_content_range_discards_the_part(server, env, tmp_path, capsys):
    handlers = [serve_truncated(OLD[:4000], announced=len(OLD)), serve_bad_range(OLD)]
    count = {"n": 0}

    def sequence(h):  # type: ignore[no-untyped-def]
        count["n"] += 1
        handlers[min(count["n"], len(handlers)) - 1](h)

    server.route(media("w.bin"), sequence)
    lock = write_lock(tmp_path / "l.toml", OLD)
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 0, err
    requests = server.requests_for(media("w.bin"))
    assert [r.headers.get("Range") for r in requests] == [None, "bytes=4000-", None]
    assert not list((env / "downloads").rglob("*.part"))


def test_trickling_server_ends_by_the_deadline(server, env, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GUARDREPRO_FETCH_DEADLINE_S", "2")
    server.route(media("w.bin"), serve_trickle(OLD[:200], interval_s=0.1))
    lock = write_lock(tmp_path / "l.toml", OLD[:200])
    start = time.monotonic()
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    elapsed = time.monotonic() - start
    assert code == 4, err
    assert "deadline" in err and "w.bin" in err
    assert elapsed < 6, elapsed
    parts = list((env / "downloads").rglob("*.part"))
    assert len(parts) == 1 and 5 <= parts[0].stat().st_size < 200  # kept, a byte at a time


def test_trickle_below_minimum_rate_is_retried_then_reported(
    server, env, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("GUARDREPRO_FETCH_RATE_WINDOW_S", "0.5")
    monkeypatch.setenv("GUARDREPRO_FETCH_MIN_RATE_BPS", "1000")
    monkeypatch.setenv("GUARDREPRO_FETCH_RETRIES", "2")
    server.route(media("w.bin"), serve_trickle(OLD[:200], interval_s=0.05))
    lock = write_lock(tmp_path / "l.toml", OLD[:200])
    code, _, err = cli(capsys, "fetch", str(lock), "--no-progress")
    assert code == 4, err
    assert "under the minimum 1000 B/s" in err
    assert len(server.requests_for(media("w.bin"))) == 2


def test_concurrent_first_downloads_cannot_both_pin(server, env, tmp_path):
    server.route(media("w.bin"), serve_racing([OLD, NEW]))
    lock = write_lock(tmp_path / "l.toml", None)
    before = lock.read_text()
    shared = tmp_path / "pinned.toml"  # both record their pins here (`fetch --out`)
    procs = []
    for i in range(2):
        run_env = {**os.environ, "GUARDREPRO_HOME": str(tmp_path / f"home{i}")}
        run_env["PYTHONPATH"] = str(ROOT) + os.pathsep + run_env.get("PYTHONPATH", "")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "guardrepro", "fetch", str(lock), "--no-progress",
                 "--out", str(shared)],
                env=run_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    winner = next(out for code, out, _ in results if code == 0)
    loser = next(err for code, _, err in results if code == 2)
    assert "pinned now" in winner
    assert "pinned meanwhile" in loser and "refused" in loser and "w.bin" in loser
    assert lock.read_text() == before
    entry = load_lock(shared).file("w.bin")
    served = OLD if sha(OLD) in winner else NEW
    assert (entry.sha256, entry.size) == (sha(served), len(served))
