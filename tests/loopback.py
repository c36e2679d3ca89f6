"""Real HTTP servers on 127.0.0.1 for tests: plain file routes and a minimal Hub.

``LoopbackServer`` serves registered routes (whole files with Range and If-Range
support, a body shorter than its Content-Length, a body without Content-Length, a
trickle, a file that changes mid-download, a 206 with the wrong Content-Range,
racing clients held at a barrier, a run of failures before success) and records
every request (method, path, headers). ``HubServer`` adds enough of the Hugging Face
Hub's resolve protocol for ``huggingface_hub.hf_hub_download``: ``HEAD``/``GET
/{repo}/resolve/{revision}/{filename}`` answering with ``X-Repo-Commit``, ``ETag``
(the git blob sha1 for regular files), and for LFS files a 302 to a "CDN" URL on a
different host name (``localhost``) carrying ``X-Linked-Etag`` (the sha256) and
``X-Linked-Size``, as the real hub does (a file's ``get`` handler, when set, answers
the GET of its bytes, so a body can contradict what HEAD said), and
``GET /api/models/{repo}/tree/{revision}``
(the listing ``snapshot_download`` and ``list_repo_tree`` read); unknown files get 404 with
``X-Error-Code: EntryNotFound``, unknown revisions ``RevisionNotFound``.

No network beyond loopback; each server runs in a daemon thread and is stopped by
leaving its ``with`` block.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


def sha(data: bytes) -> str:
    """Hex sha256 of ``data`` (what a lock pins)."""
    return hashlib.sha256(data).hexdigest()

Handler = Callable[["_RequestHandler"], None]


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


def _send(h: _RequestHandler, status: int, headers: dict[str, str], body: bytes = b"") -> None:
    h.send_response(status)
    for key, value in headers.items():
        h.send_header(key, value)
    h.end_headers()
    if h.command != "HEAD" and body:
        h.wfile.write(body)


def serve_bytes(
    data: bytes, *, ranges: bool = True, extra: dict[str, str] | None = None
) -> Handler:
    """Serve ``data``; honour ``Range: bytes=N-[M]`` with 206 unless ``ranges`` is False.

    An ``If-Range`` that differs from the ``ETag`` in ``extra`` gets the whole file
    (200), as RFC 9110 asks."""

    def handle(h: _RequestHandler) -> None:
        headers = {"Content-Type": "application/octet-stream", **(extra or {})}
        spec = h.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", spec or "")
        if_range = h.headers.get("If-Range")
        if if_range is not None and if_range != headers.get("ETag"):
            match = None
        if ranges and match:
            start = int(match.group(1))
            end = int(match.group(2)) if match.group(2) else len(data) - 1
            if start >= len(data):
                _send(h, 416, {"Content-Range": f"bytes */{len(data)}", "Content-Length": "0"})
                return
            part = data[start : end + 1]
            headers["Content-Range"] = f"bytes {start}-{start + len(part) - 1}/{len(data)}"
            headers["Content-Length"] = str(len(part))
            _send(h, 206, headers, part)
            return
        headers["Content-Length"] = str(len(data))
        _send(h, 200, headers, data)

    return handle


def serve_truncated(data: bytes, announced: int) -> Handler:
    """Announce ``announced`` bytes, send ``data`` (shorter), close the connection."""

    def handle(h: _RequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(announced))
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()
        h.close_connection = True

    return handle


def serve_no_length(data: bytes) -> Handler:
    """Send ``data`` with no Content-Length (the end is the closed connection)."""

    def handle(h: _RequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()
        h.close_connection = True

    return handle


def serve_trickle(data: bytes, interval_s: float) -> Handler:
    """Announce all of ``data``, then send it one byte per ``interval_s``."""

    def handle(h: _RequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        try:
            for i in range(len(data)):
                h.wfile.write(data[i : i + 1])
                h.wfile.flush()
                time.sleep(interval_s)
        except OSError:  # the client gave up
            pass
        h.close_connection = True

    return handle


def serve_endless(block: bytes, announced: int | None = None, seconds: float = 30.0) -> Handler:
    """Repeat ``block`` for up to ``seconds`` (a body that never ends), with no
    Content-Length unless ``announced`` is given; stops when the client hangs up."""

    def handle(h: _RequestHandler) -> None:
        h.send_response(200)
        if announced is not None:
            h.send_header("Content-Length", str(announced))
        h.end_headers()
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                h.wfile.write(block)
        except OSError:  # the client gave up
            pass
        h.close_connection = True

    return handle


def serve_slow_headers(data: bytes, interval_s: float) -> Handler:
    """Send the status line and headers one byte per ``interval_s``, then ``data``."""

    def handle(h: _RequestHandler) -> None:
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\n"
            "X-Padding: " + "p" * 200 + "\r\n\r\n"
        ).encode()
        try:
            for i in range(len(head)):
                h.wfile.write(head[i : i + 1])
                h.wfile.flush()
                time.sleep(interval_s)
            h.wfile.write(data)
        except OSError:  # the client gave up
            pass
        h.close_connection = True

    return handle


def serve_encoded(data: bytes, encoding: str = "gzip") -> Handler:
    """Send ``data`` gzip-compressed with ``Content-Encoding`` (whatever was asked)."""
    import gzip

    body = gzip.compress(data, mtime=0)

    def handle(h: _RequestHandler) -> None:
        _send(h, 200, {"Content-Encoding": encoding, "Content-Length": str(len(body))}, body)

    return handle


def serve_changing(old: bytes, new: bytes, cut: int) -> Handler:
    """The file changes on the server mid-download: the first request gets the first
    ``cut`` bytes of ``old`` (ETag "v1", full length announced, connection closed);
    every later request is answered from ``new`` (ETag "v2"), honouring If-Range."""
    count = {"n": 0}
    lock = threading.Lock()
    later = serve_bytes(new, extra={"ETag": '"v2"'})

    def handle(h: _RequestHandler) -> None:
        with lock:
            count["n"] += 1
            first = count["n"] == 1
        if not first:
            later(h)
            return
        h.send_response(200)
        h.send_header("Content-Length", str(len(old)))
        h.send_header("ETag", '"v1"')
        h.end_headers()
        h.wfile.write(old[:cut])
        h.wfile.flush()
        h.close_connection = True

    return handle


def serve_bad_range(data: bytes) -> Handler:
    """Whole file without Range; a 206 whose Content-Range starts at byte 0 (not at
    the requested offset) with one."""

    def handle(h: _RequestHandler) -> None:
        if h.headers.get("Range") is None:
            serve_bytes(data)(h)
            return
        headers = {
            "Content-Range": f"bytes 0-{len(data) - 1}/{len(data)}",
            "Content-Length": str(len(data)),
        }
        _send(h, 206, headers, data)

    return handle


def serve_racing(bodies: list[bytes], timeout_s: float = 20.0) -> Handler:
    """Hold each request until ``len(bodies)`` have arrived, then answer the i-th
    arrival with ``bodies[i]`` (so concurrent clients overlap for sure)."""
    barrier = threading.Barrier(len(bodies), timeout=timeout_s)
    count = {"n": 0}
    lock = threading.Lock()

    def handle(h: _RequestHandler) -> None:
        with lock:
            index = count["n"]
            count["n"] += 1
        if index < len(bodies):
            barrier.wait()
        serve_bytes(bodies[min(index, len(bodies) - 1)])(h)

    return handle


def fail_then(handler: Handler, failures: int, status: int = 500) -> Handler:
    """Answer ``status`` to the first ``failures`` requests, then delegate."""
    count = {"n": 0}
    lock = threading.Lock()

    def handle(h: _RequestHandler) -> None:
        with lock:
            count["n"] += 1
            failing = count["n"] <= failures
        if failing:
            _send(h, status, {"Content-Length": "5"}, b"oops\n")
        else:
            handler(h)

    return handle


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        self.server.owner.requests.append(
            Request(self.command, path, {k: v for k, v in self.headers.items()})
        )
        handler = self.server.owner.resolve(self, path)
        if handler is None:
            _send(self, 404, {"Content-Length": "10"}, b"not found\n")
        else:
            handler(self)

    do_GET = _dispatch
    do_HEAD = _dispatch


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackServer


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 with exact-path routes and a request log."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.requests: list[Request] = []
        self._server = _Server(("127.0.0.1", 0), _RequestHandler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def route(self, path: str, handler: Handler) -> None:
        self.routes[path] = handler

    def resolve(self, h: _RequestHandler, path: str) -> Handler | None:
        return self.routes.get(path)

    def requests_for(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob, which the Hub uses as ETag of a non-LFS file."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubFile:
    data: bytes
    lfs: bool
    advertised_sha256: str | None = None  # lie about the LFS sha256 when set
    get: Handler | None = None  # answers GET of the bytes when set; HEAD still tells data


@dataclass
class HubRepo:
    repo: str
    commit: str
    files: dict[str, HubFile] = field(default_factory=dict)
    served_commit: str | None = None  # report another X-Repo-Commit when set


class HubServer(LoopbackServer):
    """Enough of the Hub's ``/resolve`` protocol for hf_hub_download (2.x)."""

    def __init__(self, repo: HubRepo) -> None:
        super().__init__()
        self.repo = repo

    def resolve(self, h: _RequestHandler, path: str) -> Handler | None:
        repo = self.repo
        tree = f"/api/models/{repo.repo}/tree/"
        if path.startswith(tree):  # list_repo_tree (snapshot_download, lock --hub)
            return self._tree(path[len(tree) :].split("?", 1)[0])
        prefix = f"/{repo.repo}/resolve/"
        if path.startswith("/cdn/"):
            name = unquote(path[len("/cdn/") :])
            hub_file = repo.files.get(name)
            if hub_file is not None and hub_file.get is not None and h.command == "GET":
                return hub_file.get
            return None if hub_file is None else serve_bytes(hub_file.data)
        if not path.startswith(prefix):
            return None
        revision, _, filename = path[len(prefix) :].partition("/")
        filename = unquote(filename)
        commit = repo.served_commit or repo.commit
        if revision not in (repo.commit, "main"):
            return lambda hh: _send(
                hh, 404, {"X-Error-Code": "RevisionNotFound", "Content-Length": "0"}
            )
        hub_file = repo.files.get(filename)
        if hub_file is None:
            return lambda hh: _send(
                hh,
                404,
                {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit, "Content-Length": "0"},
            )
        if not hub_file.lfs:
            if hub_file.get is not None and h.command == "GET":
                return hub_file.get
            etag = f'"{git_blob_sha1(hub_file.data)}"'
            return serve_bytes(hub_file.data, extra={"ETag": etag, "X-Repo-Commit": commit})
        sha = hub_file.advertised_sha256 or hashlib.sha256(hub_file.data).hexdigest()
        # a different host name than the resolve URL: the client must not follow it on HEAD
        location = f"http://localhost:{self.port}/cdn/{filename}"
        headers = {
            "Location": location,
            "X-Repo-Commit": commit,
            "X-Linked-Etag": f'"{sha}"',
            "X-Linked-Size": str(len(hub_file.data)),
            "ETag": f'"{git_blob_sha1(b"pointer " + sha.encode())}"',
            "Content-Length": "0",
        }
        return lambda hh: _send(hh, 302, headers)

    def _tree(self, revision: str) -> Handler:
        repo = self.repo
        if revision not in (repo.commit, "main"):
            return lambda hh: _send(
                hh, 404, {"X-Error-Code": "RevisionNotFound", "Content-Length": "0"}
            )
        items = []
        for name, hub_file in sorted(repo.files.items()):
            item: dict[str, Any] = {"type": "file", "path": name, "size": len(hub_file.data)}
            if hub_file.lfs:
                sha = hub_file.advertised_sha256 or hashlib.sha256(hub_file.data).hexdigest()
                item["oid"] = git_blob_sha1(b"pointer " + sha.encode())
                item["lfs"] = {"oid": sha, "size": len(hub_file.data), "pointerSize": 130}
            else:
                item["oid"] = git_blob_sha1(hub_file.data)
            items.append(item)
        body = json.dumps(items).encode()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        return lambda hh: _send(hh, 200, headers, body)
