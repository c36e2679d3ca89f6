"""Plain HTTP(S) download of one pinned file, resumable, verified, atomically placed.

Input: a URL, a destination path, the expected size and sha256 (either may be
unknown for a first-download pin), a label for messages, a retry policy.
Output: the (sha256, size) of the bytes now at the destination.

Invariants: bytes arrive in ``<dest>.part`` (written as they come, a read at a
time) next to ``<dest>.part.json`` (the first response's validator -- strong ETag or
Last-Modified -- and the length the server attested). An existing ``.part`` is
resumed with ``Range`` plus ``If-Range: <validator>``: a 206 must start at the
requested offset and carry the same validator, else the ``.part`` is discarded; a
200 restarts from zero. A first-download pin never resumes a ``.part`` without a
validator, and is only returned when the server attested the full length
(Content-Length of a 200, or the total of a Content-Range) and the bytes match it.
5xx, resets, stalls (no byte for ``timeout_s``) and throughput under
``min_rate_bps`` over ``rate_window_s`` are retried with exponential backoff,
keeping what arrived; ``deadline_s`` bounds the whole file, connect, status line
and headers included (a watchdog cuts the connection when it passes; headers
must also arrive within one rate window). The ``.part`` never grows past the
pinned size, or the attested size of a first-download pin: more bytes are a
TransientFetchError and the ``.part`` is discarded; a first-download pin whose
length nobody attests is refused before its body is read; a Content-Encoding
other than identity is refused. Failures that survive every retry (or the
deadline) raise TransientFetchError (exit 4) naming what the server did; a
complete body of the wrong size or hash raises IntegrityError naming the file, URL,
expected and observed sha256/size. The destination name only ever holds bytes
whose size and sha256 matched (``os.replace`` after fsync). A symlink planted at
``.part`` is refused, naming it; one at ``.part.json`` is never read and is
replaced (``artifacts.nofollow``): no byte goes through a link.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guardrepro import __version__
from guardrepro.artifacts.fetch_policy import RetryPolicy
from guardrepro.artifacts.nofollow import open_file, output_error
from guardrepro.artifacts.store import atomic_write_bytes, fsync_dir, open_regular, sha256_file
from guardrepro.artifacts.watchdog import Watchdog, opener
from guardrepro.errors import (
    FetchError,
    GuardreproError,
    IntegrityError,
    TransientFetchError,
)
from guardrepro.progress import Progress, progress_bar

READ_SIZE = 1 << 16
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class _Retry(Exception):
    """A transient failure: try again after backoff."""


class _Deadline(Exception):
    """The per-file deadline passed; the message says what the server was doing."""


def _describe(label: str, url: str) -> str:
    return f"{label} ({url})"


@dataclass
class _Meta:
    """What ``<dest>.part.json`` keeps about the bytes in ``.part``. A symlink
    there is never read (it reads as no metadata) and is replaced on save."""

    validator: str | None = None
    total: int | None = None  # the length the server attested

    @classmethod
    def load(cls, path: Path) -> _Meta:
        try:
            with os.fdopen(open_regular(path), "rb") as fh:  # never through a link
                raw = json.loads(fh.read().decode("utf-8"))
            validator, total = raw.get("validator"), raw.get("total")
        except (OSError, ValueError, AttributeError):
            return cls()
        return cls(
            validator if isinstance(validator, str) else None,
            total if isinstance(total, int) and not isinstance(total, bool) else None,
        )

    def save(self, path: Path) -> None:
        """Written whole (a link at ``path`` replaced); OutputError naming ``path``."""
        data = json.dumps({"validator": self.validator, "total": self.total})
        atomic_write_bytes(path, data.encode("utf-8"), durable=False)


def _validator(response: http.client.HTTPResponse) -> str | None:
    """A validator usable in If-Range: a strong ETag, else Last-Modified."""
    etag = response.headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return response.headers.get("Last-Modified") or None


def _open(
    url: str, offset: int, validator: str | None, timeout: float, dog: Watchdog
) -> http.client.HTTPResponse:
    headers = {"User-Agent": f"guardrepro/{__version__}", "Accept-Encoding": "identity"}
    if offset > 0:
        headers["Range"] = f"bytes={offset}-"
        if validator is not None:
            headers["If-Range"] = validator
    request = urllib.request.Request(url, headers=headers)
    response = opener(dog).open(request, timeout=timeout)
    assert isinstance(response, http.client.HTTPResponse)
    return response


def _discard(part: Path, meta: Path) -> None:
    for path in (part, meta):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _start(
    response: http.client.HTTPResponse, offset: int, old: _Meta, part: Path, meta: Path, what: str
) -> tuple[int, _Meta]:
    """Where the body starts in the file and the metadata now valid for ``.part``."""
    new_validator = _validator(response)
    length = response.headers.get("Content-Length")
    body_size = int(length) if length is not None and length.isdigit() else None
    if response.status != 206:  # the whole file from byte 0
        return 0, _Meta(new_validator, body_size)
    got = response.headers.get("Content-Range", "")
    match = _CONTENT_RANGE.match(got)
    if match is None or int(match.group(1)) != offset:
        _discard(part, meta)
        raise _Retry(
            f"{what}: the server answered Range bytes={offset}- with 206 and Content-Range"
            f" {got!r}, which does not start at byte {offset}; the partial file was discarded"
        )
    if old.validator is not None and new_validator not in (None, old.validator):
        _discard(part, meta)
        raise _Retry(
            f"{what}: the file changed on the server during the download (validator"
            f" {old.validator} became {new_validator}); the partial file was discarded"
        )
    total = int(match.group(3)) if match.group(3).isdigit() else None
    return offset, _Meta(old.validator or new_validator, total)


@dataclass
class _Clock:
    """Deadline and minimum-throughput bookkeeping for one file."""

    policy: RetryPolicy
    deadline: float

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def socket_timeout(self) -> float:
        left = self.left()
        if left <= 0:
            raise _Deadline("the deadline passed before the request")
        return max(0.05, min(self.policy.timeout_s, left))

    def arm_headers(self, dog: Watchdog) -> None:
        """Connect, status line and headers must all arrive within the rate window
        (a window's minimum byte count is far more than any header block) and the
        deadline, whichever ends first."""
        left, window = self.left(), self.policy.rate_window_s
        if left <= window:
            dog.arm(left, f"deadline: the status line and headers had not all arrived after"
                    f" {left:.1f} s")
        else:
            dog.arm(window, f"the status line and headers had not all arrived after"
                    f" {window:g} s (the minimum-rate window)")

    def fired(self, dog: Watchdog) -> None:
        """Raise what the watchdog's expiry means, if it fired."""
        if dog.fired is None:
            return
        if dog.fired.startswith("deadline: "):
            raise _Deadline(dog.fired.removeprefix("deadline: "))
        raise _Retry(dog.fired)


def _write(out: Any, chunk: bytes, part: Path) -> None:
    try:
        out.write(chunk)
        out.flush()  # small chunks reach the file as they come
    except OSError as exc:
        raise output_error(part, exc) from None


def _copy_body(
    response: http.client.HTTPResponse,
    out: Any,
    clock: _Clock,
    dog: Watchdog,
    io: tuple[str, Path, Progress],
    start: int,
    limit: int | None,
) -> int:
    """Copy the body to ``out`` a read at a time, never past byte ``limit`` of the
    file; return the bytes received."""
    what, part, bar = io
    policy = clock.policy
    received = 0
    window_start, window_bytes = time.monotonic(), 0
    while True:
        try:
            chunk = response.read1(READ_SIZE)
        except TimeoutError:
            clock.fired(dog)
            raise _Retry(
                f"{what}: stalled: no byte for {policy.timeout_s:g} s after"
                f" {start + received} bytes"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            clock.fired(dog)
            raise _Retry(
                f"{what}: connection broke after {start + received} bytes: {exc}"
            ) from None
        if not chunk:
            clock.fired(dog)
            return received
        if limit is not None and start + received + len(chunk) > limit:
            _write(out, chunk[: max(0, limit - start - received)], part)
            raise _TooLong(limit, start + received + len(chunk))
        _write(out, chunk, part)
        received += len(chunk)
        window_bytes += len(chunk)
        bar.update(len(chunk))
        now = time.monotonic()
        if now >= clock.deadline:
            raise _Deadline(f"the body was still arriving after {start + received} bytes")
        if now - window_start >= policy.rate_window_s:
            rate = window_bytes / (now - window_start)
            if rate < policy.min_rate_bps:
                raise _Retry(
                    f"{what}: the server sent {window_bytes} bytes in {now - window_start:.0f} s"
                    f" ({rate:.0f} B/s, under the minimum {policy.min_rate_bps:g} B/s)"
                )
            window_start, window_bytes = now, 0


class _TooLong(Exception):
    """The server sent more bytes than the pinned (or attested) size."""

    def __init__(self, limit: int, seen: int) -> None:
        super().__init__(limit, seen)
        self.limit, self.seen = limit, seen


def _request(
    url: str, offset: int, old: _Meta, clock: _Clock, dog: Watchdog, what: str,
    part: Path,
) -> http.client.HTTPResponse:
    """The response to one GET (status line and headers read); _Retry on trouble."""
    meta_path = part.with_name(part.name + ".json")
    clock.arm_headers(dog)
    try:
        response = _open(url, offset, old.validator, clock.socket_timeout(), dog)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and offset > 0:
            _discard(part, meta_path)  # the server cannot resume from here; start over
            raise _Retry(f"{what}: HTTP 416 for Range bytes={offset}-") from None
        if exc.code >= 500 or exc.code in (408, 429):
            raise _Retry(f"{what}: HTTP {exc.code} {exc.reason}") from None
        raise FetchError(f"{what}: HTTP {exc.code} {exc.reason}") from None
    except TimeoutError:
        clock.fired(dog)
        raise _Retry(f"{what}: no answer within {clock.policy.timeout_s:g} s") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        clock.fired(dog)
        reason = getattr(exc, "reason", exc)
        raise _Retry(f"{what}: connection failed: {reason}") from None
    if dog.fired is not None:  # headers cut short by the watchdog parse as complete
        response.close()
        clock.fired(dog)
    encoding = (response.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding != "identity":
        response.close()
        raise TransientFetchError(
            f"{what}: the server answered with Content-Encoding: {encoding} although"
            " identity was asked for; encoded bytes are refused (they are not the file"
            " the pin names, and a first-download pin must not record them)"
        )
    return response


def _download_once(
    url: str,
    part: Path,
    expected_size: int | None,
    expected_sha256: str | None,
    label: str,
    clock: _Clock,
    progress: bool,
) -> None:
    """One request; appends to or rewrites ``part``; raises _Retry on transient trouble."""
    what = _describe(label, url)
    meta_path = part.with_name(part.name + ".json")
    offset = part.stat().st_size if part.exists() else 0
    old = _Meta.load(meta_path)
    if expected_size is not None and offset >= expected_size:
        if offset == expected_size:
            return  # a complete .part from an earlier run: verify it as is
        _discard(part, meta_path)  # longer than the pin: cannot be right
        offset, old = 0, _Meta()
    if offset > 0 and expected_sha256 is None and old.validator is None:
        _discard(part, meta_path)  # no way to tell a resume from a mix: start over
        offset, old = 0, _Meta()
    dog = Watchdog()
    try:
        response = _request(url, offset, old, clock, dog, what, part)
        dog.arm(clock.left(), "deadline: the body was still arriving")
        with response:
            _receive(response, part, expected_size, expected_sha256, label, clock, dog, offset,
                     old, progress)
    finally:
        dog.disarm()


def _receive(
    response: http.client.HTTPResponse, part: Path, expected_size: int | None,
    expected_sha256: str | None, label: str, clock: _Clock, dog: Watchdog, offset: int,
    old: _Meta, progress: bool,
) -> None:
    """Write the response's body into ``part``, at most the pinned or attested size."""
    what = _describe(label, response.geturl())
    meta_path = part.with_name(part.name + ".json")
    start, meta = _start(response, offset, old, part, meta_path, what)
    if expected_size is not None and meta.total not in (None, expected_size):
        _discard(part, meta_path)
        raise IntegrityError(
            f"{what}: size mismatch: the server announces {meta.total} bytes, the lock pins"
            f" {expected_size} bytes (sha256 {expected_sha256}); nothing was downloaded"
        )
    limit = expected_size if expected_size is not None else meta.total
    if limit is None and expected_sha256 is None:
        _discard(part, meta_path)
        raise IntegrityError(
            f"{what}: not pinned: the server sent no Content-Length, so a body cut short"
            " cannot be told apart; nothing was downloaded"
        )
    meta.save(meta_path)
    length = response.headers.get("Content-Length")
    body_size = int(length) if length is not None and length.isdigit() else None
    # never through a link planted at .part (refused, naming it); cut to ``start`` below
    out = os.fdopen(open_file(part, os.O_RDWR | os.O_CREAT), "r+b")
    try:  # a full disk also fails the flush on the way out: name the .part either way
        with (
            out,
            progress_bar(limit, label[-40:], "B", enabled=progress, leave=False,
                         initial=start) as bar,
        ):
            out.seek(start)
            out.truncate()
            try:
                received = _copy_body(response, out, clock, dog, (what, part, bar), start, limit)
            except _TooLong as exc:
                out.close()
                _discard(part, meta_path)
                kind = "pinned" if expected_size is not None else "attested"
                raise TransientFetchError(
                    f"{what}: the server sent more than the {exc.limit} {kind} bytes (at least"
                    f" {exc.seen}); writing stopped at {exc.limit} bytes and the partial file"
                    " was discarded"
                ) from None
            finally:
                if not out.closed:
                    out.flush()
                    os.fsync(out.fileno())
    except GuardreproError:
        raise  # FetchError and OutputError are OSErrors too, already in words
    except OSError as exc:
        raise output_error(part, exc) from None
    if body_size is not None and received != body_size:
        raise _Retry(f"{what}: the body ended after {received} of {body_size} announced bytes")


def _attested(part: Path, size: int, what: str) -> None:
    """Refuse a first-download pin whose length the server did not attest."""
    meta_path = part.with_name(part.name + ".json")
    total = _Meta.load(meta_path).total
    if total == size:
        return
    _discard(part, meta_path)
    if total is None:
        why = "the server sent no Content-Length, so a body cut short cannot be told apart"
    else:
        why = f"the server attested {total} bytes"
    raise IntegrityError(
        f"{what}: not pinned: {size} bytes arrived and {why}; the download was discarded"
    )


def download(
    url: str,
    dest: Path,
    *,
    expected_sha256: str | None,
    expected_size: int | None,
    label: str,
    policy: RetryPolicy | None = None,
    progress: bool = True,
) -> tuple[str, int]:
    """Download ``url`` to ``dest`` (resuming ``dest.part``); return (sha256, size).

    With ``expected_sha256``/``expected_size`` unset (a first-download pin) the bytes
    are accepted only when their length was attested by the server; their hash is
    returned for the caller to record.
    """
    policy = policy or RetryPolicy.from_env()
    what = _describe(label, url)
    part = dest.with_name(dest.name + ".part")
    meta_path = part.with_name(part.name + ".json")
    dest.parent.mkdir(parents=True, exist_ok=True)
    clock = _Clock(policy, time.monotonic() + policy.deadline_s)
    pinned = expected_sha256 is not None
    last, wrong_size = "", False
    for attempt in range(policy.attempts):
        try:
            _download_once(url, part, expected_size, expected_sha256, label, clock, progress)
        except _Deadline as exc:
            have = part.stat().st_size if part.exists() else 0
            now = f"; {exc}" if str(exc) else ""
            raise TransientFetchError(
                f"{what}: gave up at the {policy.deadline_s:g} s deadline for this file with"
                f" {have} bytes kept in {part} (resumed by the next fetch){now}; last problem:"
                f" {last or 'the server was too slow'}"
            ) from None
        except _Retry as exc:
            last, wrong_size = str(exc), False
            if attempt + 1 < policy.attempts:
                time.sleep(min(policy.delay(attempt), max(0.0, clock.deadline - time.monotonic())))
            continue
        size = part.stat().st_size
        if expected_size is not None and size != expected_size:
            last, wrong_size = (
                f"{what}: a complete body of {size} bytes, expected {expected_size}",
                True,
            )
            if size > expected_size:
                _discard(part, meta_path)
            if attempt + 1 < policy.attempts:
                time.sleep(min(policy.delay(attempt), max(0.0, clock.left())))
            continue
        if not pinned:
            _attested(part, size, what)
        observed, size = sha256_file(part)
        if expected_sha256 is not None and observed != expected_sha256:
            _discard(part, meta_path)
            expected = "unknown" if expected_size is None else str(expected_size)
            raise IntegrityError(
                f"{what}: sha256 mismatch: expected {expected_sha256} ({expected} bytes),"
                f" observed {observed} ({size} bytes); the download was discarded"
            )
        os.replace(part, dest)
        with contextlib.suppress(FileNotFoundError):
            meta_path.unlink()
        fsync_dir(dest.parent)
        return observed, size
    if wrong_size:
        raise IntegrityError(
            f"size mismatch after {policy.attempts} attempts: {last} (expected sha256"
            f" {expected_sha256 or 'to be recorded'})"
        )
    raise TransientFetchError(f"{what}: download failed after {policy.attempts} attempts: {last}")
