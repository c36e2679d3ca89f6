"""Plain HTTP(S) download of one pinned file, resumable, verified, atomically placed.

Input: a URL, a destination path, the expected size and sha256 (either may be
unknown for a first-download pin), a label for messages, a retry policy.
Output: the (sha256, size) of the bytes now at the destination.

Invariants: bytes arrive in ``<dest>.part``; an existing ``.part`` is resumed with a
``Range`` request (a 206 must start at the requested offset; a 200 restarts from
zero); 5xx, connection errors and short bodies are retried with exponential
backoff, keeping what arrived; the destination name only ever holds bytes whose
size and sha256 matched (``os.replace`` after fsync). A complete body with the wrong
hash, or a size that never comes right, raises IntegrityError naming the file, URL,
expected and observed sha256/size, and leaves nothing under the destination name.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from guardrepro import __version__
from guardrepro.cache import CHUNK, fsync_dir, sha256_file
from guardrepro.errors import FetchError, IntegrityError

RETRIES_ENV = "GUARDREPRO_FETCH_RETRIES"
BACKOFF_ENV = "GUARDREPRO_FETCH_BACKOFF_S"
TIMEOUT_ENV = "GUARDREPRO_FETCH_TIMEOUT_S"
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: attempts in total, first backoff (doubles), socket timeout."""

    attempts: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    timeout_s: float = 60.0

    @classmethod
    def from_env(cls) -> RetryPolicy:
        """Defaults overridden by GUARDREPRO_FETCH_RETRIES / _BACKOFF_S / _TIMEOUT_S."""
        base = cls()
        try:
            return cls(
                attempts=max(1, int(os.environ.get(RETRIES_ENV, base.attempts))),
                backoff_s=float(os.environ.get(BACKOFF_ENV, base.backoff_s)),
                timeout_s=float(os.environ.get(TIMEOUT_ENV, base.timeout_s)),
            )
        except ValueError as exc:
            raise FetchError(f"bad retry setting in the environment: {exc}") from None

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (0-based)."""
        return min(self.max_backoff_s, self.backoff_s * (2**attempt))


class _Retry(Exception):
    """A transient failure: try again after backoff."""


def _describe(label: str, url: str) -> str:
    return f"{label} ({url})"


def _open(url: str, offset: int, timeout: float) -> http.client.HTTPResponse:
    headers = {"User-Agent": f"guardrepro/{__version__}", "Accept-Encoding": "identity"}
    if offset > 0:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    response = urllib.request.urlopen(request, timeout=timeout)
    assert isinstance(response, http.client.HTTPResponse)
    return response


def _start_offset(response: http.client.HTTPResponse, offset: int, what: str) -> int:
    """Where the body starts in the file: ``offset`` for a matching 206, else 0."""
    if response.status == 206:
        match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
        if match is None or int(match.group(1)) != offset:
            raise _Retry(
                f"{what}: 206 with Content-Range {response.headers.get('Content-Range')!r}"
                f" does not start at byte {offset}"
            )
        return offset
    return 0  # 200: the server sent the whole file


def _download_once(
    url: str,
    part: Path,
    expected_size: int | None,
    label: str,
    policy: RetryPolicy,
    progress: bool,
) -> None:
    """One request; appends to or rewrites ``part``; raises _Retry on transient trouble."""
    what = _describe(label, url)
    offset = part.stat().st_size if part.exists() else 0
    if expected_size is not None and offset >= expected_size:
        if offset == expected_size:
            return  # a complete .part from an earlier run: verify it as is
        part.unlink()  # longer than the pin: cannot be right
        offset = 0
    try:
        response = _open(url, offset, policy.timeout_s)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and offset > 0:
            part.unlink()  # the server cannot resume from here; start over
            raise _Retry(f"{what}: 416 for Range bytes={offset}-") from None
        if exc.code >= 500 or exc.code in (408, 429):
            raise _Retry(f"{what}: HTTP {exc.code}") from None
        raise FetchError(f"{what}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _Retry(f"{what}: {exc}") from None
    with response:
        start = _start_offset(response, offset, what)
        length = response.headers.get("Content-Length")
        body_size = int(length) if length is not None and length.isdigit() else None
        total = (
            expected_size
            if expected_size is not None
            else (start + body_size if body_size is not None else None)
        )
        received = 0
        with (
            open(part, "r+b" if start and part.exists() else "wb") as out,
            tqdm(
                total=total,
                initial=start,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=label[-40:],
                file=sys.stderr,
                disable=not progress,
                leave=False,
            ) as bar,
        ):
            out.seek(start)
            out.truncate()
            try:
                while True:
                    chunk = response.read(CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
            except (OSError, http.client.HTTPException) as exc:
                raise _Retry(
                    f"{what}: connection broke after {start + received} bytes: {exc}"
                ) from None
            finally:
                out.flush()
                os.fsync(out.fileno())
        if body_size is not None and received != body_size:
            raise _Retry(f"{what}: body ended after {received} of {body_size} announced bytes")


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
    are accepted as they are and their hash returned for the caller to record.
    """
    policy = policy or RetryPolicy.from_env()
    what = _describe(label, url)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    last = ""
    for attempt in range(policy.attempts):
        try:
            _download_once(url, part, expected_size, label, policy, progress)
        except _Retry as exc:
            last = str(exc)
            if attempt + 1 < policy.attempts:
                time.sleep(policy.delay(attempt))
            continue
        size = part.stat().st_size
        if expected_size is not None and size != expected_size:
            last = f"{what}: size {size}, expected {expected_size}"
            if attempt + 1 < policy.attempts:
                time.sleep(policy.delay(attempt))
            continue
        observed, size = sha256_file(part)
        if expected_sha256 is not None and observed != expected_sha256:
            part.unlink()
            expected = "unknown" if expected_size is None else str(expected_size)
            raise IntegrityError(
                f"{what}: sha256 mismatch: expected {expected_sha256} ({expected} bytes),"
                f" observed {observed} ({size} bytes); the download was discarded"
            )
        os.replace(part, dest)
        fsync_dir(dest.parent)
        return observed, size
    observed_size = part.stat().st_size if part.exists() else 0
    if expected_size is not None and observed_size != expected_size:
        with contextlib.suppress(OSError):
            if observed_size > expected_size:
                part.unlink()
        raise IntegrityError(
            f"{what}: size mismatch after {policy.attempts} attempts: expected {expected_size}"
            f" bytes, observed {observed_size} (expected sha256"
            f" {expected_sha256 or 'to be recorded'}); last problem: {last}"
        )
    raise FetchError(f"{what}: download failed after {policy.attempts} attempts: {last}")
