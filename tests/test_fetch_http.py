"""HTTP fetch against a real loopback server: good files, truncation, wrong bytes,
5xx then success, Range resume, first-download pins of github-source files."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

import pytest
from loopback import LoopbackServer, fail_then, serve_bytes, serve_truncated, sha

from guardrepro.artifacts import http as fetch_http
from guardrepro.artifacts.fetch import fetch_lock, materialize
from guardrepro.artifacts.http import RetryPolicy
from guardrepro.artifacts.locks import load_lock
from guardrepro.errors import FetchError, IntegrityError, TransientFetchError

REPO = "someone/toolsafe-like"
COMMIT = "46358fa424a927a895c6c8322f99032c4eb5155e"
FAST = RetryPolicy(attempts=3, backoff_s=0.01, timeout_s=5)

DATA_A = b'[{"row": 1}, {"row": 2}]\n' * 500
DATA_B = bytes(range(256)) * 40
PROMPTS_PY = (
    b'"""fixture module shaped like the upstream prompt file."""\n'
    b"OTHER = 1\n"
    b"guard_template = (\n"
    b'    "Judge: {user_request}\\n"\n'
    b'    "Action: {agent_action} Env: {env_info}"\n'
    b")\n"
)
TEMPLATE_SHA = hashlib.sha256(
    b"Judge: {user_request}\nAction: {agent_action} Env: {env_info}"
).hexdigest()


@pytest.fixture
def env(server: LoopbackServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("GUARDREPRO_GITHUB_MEDIA_URL", server.url + "/media")
    monkeypatch.setenv("GUARDREPRO_GITHUB_RAW_URL", server.url + "/raw/")
    monkeypatch.setenv("GUARDREPRO_FETCH_RETRIES", "3")
    monkeypatch.setenv("GUARDREPRO_FETCH_BACKOFF_S", "0.01")
    monkeypatch.delenv("GUARDREPRO_HOME", raising=False)
    return tmp_path / "home"


def media(path: str) -> str:
    return f"/media/{REPO}/{COMMIT}/{path}"


def raw(path: str) -> str:
    return f"/raw/{REPO}/{COMMIT}/{path}"


def write_lock(path: Path, entries: list[str]) -> Path:
    head = f"""# test lock
name = "t"
kind = "files"

[source]
type = "github"
repo = "{REPO}"
commit = "{COMMIT}"
"""
    path.write_text(head + "".join(entries))
    return path


def entry(rel: str, data: bytes, lfs: bool = True) -> str:
    lfs_text = "true" if lfs else "false"
    return (
        f'\n[[file]]\npath = "{rel}"\nsha256 = "{sha(data)}"\nsize = {len(data)}\n'
        f"lfs = {lfs_text}\n"
    )


def test_good_files_land_verified_and_hardlinked(server, env, tmp_path):
    server.route(media("data/a.json"), serve_bytes(DATA_A))
    server.route(raw("src/b.bin"), serve_bytes(DATA_B))
    lock = write_lock(
        tmp_path / "t.toml", [entry("data/a.json", DATA_A), entry("src/b.bin", DATA_B, False)]
    )
    report = fetch_lock(lock, env, progress=False)
    assert [(f.path, f.action, f.sha256, f.size) for f in report.files] == [
        ("data/a.json", "downloaded", sha(DATA_A), len(DATA_A)),
        ("src/b.bin", "downloaded", sha(DATA_B), len(DATA_B)),
    ]
    assert (report.directory / "data/a.json").read_bytes() == DATA_A
    assert (report.directory / "src/b.bin").read_bytes() == DATA_B
    assert not report.lock_updated
    blob = env / "blobs/sha256" / sha(DATA_A)
    assert blob.read_bytes() == DATA_A
    assert os.stat(blob).st_ino == os.stat(report.directory / "data/a.json").st_ino
    for root, dirs, files in os.walk(env):
        for name in dirs + files:
            assert not Path(root, name).is_symlink()
    assert materialize(lock, env) == report.directory
    n_requests = len(server.requests)
    again = fetch_lock(lock, env, progress=False)
    assert [f.action for f in again.files] == ["cached", "cached"]
    assert len(server.requests) == n_requests  # nothing downloaded twice


def test_persistently_truncated_body_is_transient_and_leaves_no_file(server, env, tmp_path):
    server.route(media("a.json"), serve_truncated(DATA_A[:1000], announced=len(DATA_A)))
    lock = write_lock(tmp_path / "t.toml", [entry("a.json", DATA_A)])
    with pytest.raises(TransientFetchError) as err:
        fetch_lock(lock, env, progress=False)
    text = str(err.value)
    assert "a.json" in text and server.url + media("a.json") in text
    assert f"ended after 1000 of {len(DATA_A)} announced bytes" in text
    assert not (env / "blobs/sha256" / sha(DATA_A)).exists()
    assert not (env / "artifacts").exists() or not any((env / "artifacts").rglob("a.json"))
    assert len(server.requests_for(media("a.json"))) == 3  # retried, then gave up


def test_wrong_bytes_name_expected_and_observed(server, env, tmp_path):
    wrong = DATA_A[:-1] + b"?"
    server.route(media("a.json"), serve_bytes(wrong))
    lock = write_lock(tmp_path / "t.toml", [entry("a.json", DATA_A)])
    with pytest.raises(IntegrityError) as err:
        fetch_lock(lock, env, progress=False)
    text = str(err.value)
    assert sha(DATA_A) in text and sha(wrong) in text and "a.json" in text
    assert not (env / "blobs/sha256" / sha(DATA_A)).exists()
    assert not list((env / "downloads").rglob("*a.json*"))  # .part discarded too


def test_500_then_success(server, env, tmp_path):
    server.route(media("a.json"), fail_then(serve_bytes(DATA_A), failures=2))
    lock = write_lock(tmp_path / "t.toml", [entry("a.json", DATA_A)])
    report = fetch_lock(lock, env, progress=False)
    assert (report.directory / "a.json").read_bytes() == DATA_A
    assert len(server.requests_for(media("a.json"))) == 3


def test_404_is_a_fetch_error_without_retries(server, env, tmp_path):
    lock = write_lock(tmp_path / "t.toml", [entry("missing.json", DATA_A)])
    with pytest.raises(FetchError, match=r"missing\.json.*HTTP 404"):
        fetch_lock(lock, env, progress=False)
    assert len(server.requests_for(media("missing.json"))) == 1


def test_range_resume_continues_a_part_file(server, tmp_path):
    server.route("/f", serve_bytes(DATA_A))
    dest = tmp_path / "out" / "a.json"
    dest.parent.mkdir()
    (tmp_path / "out" / "a.json.part").write_bytes(DATA_A[:4096])
    got = fetch_http.download(
        server.url + "/f",
        dest,
        expected_sha256=sha(DATA_A),
        expected_size=len(DATA_A),
        label="a.json",
        policy=FAST,
        progress=False,
    )
    assert got == (sha(DATA_A), len(DATA_A))
    assert dest.read_bytes() == DATA_A
    assert not (tmp_path / "out" / "a.json.part").exists()
    (request,) = server.requests_for("/f")
    assert request.headers.get("Range") == "bytes=4096-"


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    server.route("/f", serve_bytes(DATA_A, ranges=False))
    dest = tmp_path / "a.json"
    (tmp_path / "a.json.part").write_bytes(b"X" * 100)  # garbage prefix, replaced by the 200
    fetch_http.download(
        server.url + "/f",
        dest,
        expected_sha256=sha(DATA_A),
        expected_size=len(DATA_A),
        label="a.json",
        policy=FAST,
        progress=False,
    )
    assert dest.read_bytes() == DATA_A
    assert server.requests_for("/f")[0].headers.get("Range") == "bytes=100-"


def test_resumed_garbage_prefix_fails_then_clean_retry_succeeds(server, tmp_path):
    server.route("/f", serve_bytes(DATA_A))
    dest = tmp_path / "a.json"
    (tmp_path / "a.json.part").write_bytes(b"X" * 100)  # 206 keeps the bad prefix
    with pytest.raises(IntegrityError, match=sha(DATA_A)):
        fetch_http.download(
            server.url + "/f",
            dest,
            expected_sha256=sha(DATA_A),
            expected_size=len(DATA_A),
            label="a.json",
            policy=FAST,
            progress=False,
        )
    assert not dest.exists() and not (tmp_path / "a.json.part").exists()
    fetch_http.download(
        server.url + "/f",
        dest,
        expected_sha256=sha(DATA_A),
        expected_size=len(DATA_A),
        label="a.json",
        policy=FAST,
        progress=False,
    )
    assert dest.read_bytes() == DATA_A


def test_truncation_then_resume_completes(server, tmp_path):
    """First response is cut short; the retry asks for the rest with Range."""
    full = serve_bytes(DATA_A)
    calls = {"n": 0}

    def flaky(h):
        calls["n"] += 1
        if calls["n"] == 1:
            serve_truncated(DATA_A[:5000], announced=len(DATA_A))(h)
        else:
            full(h)

    server.route("/f", flaky)
    dest = tmp_path / "a.json"
    fetch_http.download(
        server.url + "/f",
        dest,
        expected_sha256=sha(DATA_A),
        expected_size=len(DATA_A),
        label="a.json",
        policy=FAST,
        progress=False,
    )
    assert dest.read_bytes() == DATA_A
    assert server.requests_for("/f")[1].headers.get("Range") == "bytes=5000-"


def extract_entry(extract_sha: str = TEMPLATE_SHA) -> str:
    return (
        '\n[[file]]\npath = "src/agent/prompts.py"\nlfs = false\n'
        f'extract = "guard_template"\nextract_sha256 = "{extract_sha}"\n'
        'pinned_by = "first-download"\n'
    )


def test_first_download_pin_is_recorded_then_enforced(server, env, tmp_path):
    server.route(raw("src/agent/prompts.py"), serve_bytes(PROMPTS_PY))
    server.route(media("a.json"), serve_bytes(DATA_A))
    lock = write_lock(tmp_path / "t.toml", [entry("a.json", DATA_A), extract_entry()])
    report = fetch_lock(lock, env, progress=False)
    assert report.lock_updated and report.pinned_now == ("src/agent/prompts.py",)
    assert load_lock(lock).file("src/agent/prompts.py").pending  # LOCK is not rewritten
    assert report.pins_file is not None and report.pins_file.is_relative_to(env)
    pinned = load_lock(report.pins_file).file("src/agent/prompts.py")
    assert (pinned.sha256, pinned.size) == (sha(PROMPTS_PY), len(PROMPTS_PY))
    assert pinned.pinned_by == "first-download"
    assert pinned.pinned_at == dt.datetime.now(dt.UTC).date()
    assert lock.read_text().startswith("# test lock\n")
    assert (report.directory / "src/agent/prompts.py").read_bytes() == PROMPTS_PY
    # `--out`: the pinned lock written to a file to commit
    committed = tmp_path / "pinned.toml"
    again = fetch_lock(lock, env, progress=False, out=committed)
    assert again.pins_file == committed and [f.action for f in again.files] == ["cached"] * 2
    assert load_lock(committed).file("src/agent/prompts.py") == pinned
    # upstream bytes change (same extracted string): a fresh cache refuses them
    server.route(raw("src/agent/prompts.py"), serve_bytes(PROMPTS_PY + b"# changed\n"))
    with pytest.raises(IntegrityError, match=sha(PROMPTS_PY)):
        fetch_lock(committed, tmp_path / "home2", progress=False)


def test_first_download_refused_when_extracted_string_differs(server, env, tmp_path):
    server.route(raw("src/agent/prompts.py"), serve_bytes(PROMPTS_PY))
    lock = write_lock(tmp_path / "t.toml", [extract_entry("0" * 64)])
    before = lock.read_text()
    with pytest.raises(IntegrityError, match=f"guard_template.*{TEMPLATE_SHA}"):
        fetch_lock(lock, env, progress=False)
    assert lock.read_text() == before
    assert not (env / "blobs/sha256" / sha(PROMPTS_PY)).exists()
