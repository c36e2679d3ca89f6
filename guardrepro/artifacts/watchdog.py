"""A time limit over a whole HTTP exchange, not one socket read at a time.

Input: a limit in seconds and the reason to report when it passes.
Output: urllib handlers whose connections register their socket with the
watchdog; when the limit passes the watchdog shuts those sockets down, so the
read in progress (connect, status line, headers or body) returns at once.

Why: a socket timeout bounds the wait for the *next* byte only. A server that
sends its status line and headers one byte per second never trips a 60 s
socket timeout, and holds the client for as long as it likes. ``fired`` says
which limit ended the exchange, so the caller can name what the server did.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.request
from typing import Any


class Watchdog:
    """Shuts down registered sockets once an armed timer expires."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._timer: threading.Timer | None = None
        self.fired: str | None = None

    def arm(self, seconds: float, reason: str) -> None:
        """(Re)start the timer: after ``seconds`` every socket is shut down."""
        self.disarm()
        timer = threading.Timer(max(0.0, seconds), self._fire, args=(reason,))
        timer.daemon = True
        self._timer = timer
        timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            late = self.fired is not None
        if late:
            _shut(sock)

    def _fire(self, reason: str) -> None:
        with self._lock:
            self.fired = reason
            socks = list(self._socks)
        for sock in socks:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class _HTTP(http.client.HTTPConnection):
    def __init__(self, *args: Any, watchdog: Watchdog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

    def connect(self) -> None:
        super().connect()
        self._watchdog.attach(self.sock)


class _HTTPS(http.client.HTTPSConnection):
    def __init__(self, *args: Any, watchdog: Watchdog, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

    def connect(self) -> None:
        super().connect()
        self._watchdog.attach(self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watchdog: Watchdog) -> None:
        super().__init__()
        self._watchdog = watchdog

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        def conn(*args: Any, **kwargs: Any) -> _HTTP:
            return _HTTP(*args, watchdog=self._watchdog, **kwargs)

        return self.do_open(conn, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watchdog: Watchdog) -> None:
        super().__init__()
        self._watchdog = watchdog

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        def conn(*args: Any, **kwargs: Any) -> _HTTPS:
            return _HTTPS(*args, watchdog=self._watchdog, **kwargs)

        return self.do_open(conn, req, context=self._context)  # type: ignore[attr-defined]


def opener(watchdog: Watchdog) -> urllib.request.OpenerDirector:
    """A urllib opener whose HTTP(S) connections the watchdog can cut."""
    return urllib.request.build_opener(_HTTPHandler(watchdog), _HTTPSHandler(watchdog))
