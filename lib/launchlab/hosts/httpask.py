"""HTTP asked from this machine (the local and simulated hosts' probe and smoke request) with an overall deadline: a
socket timeout bounds each read, so a server that sends its answer a byte at a time would hold the asker — and the
watch it serves — as long as it likes; here a timer shuts the connection when the deadline passes."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.parse

from launchlab.hosts.commands import probes


class _Deadline:
    """Shuts a connection's socket once `timeout` seconds have passed (a read waiting on it then ends at once)."""

    def __init__(self, conn: http.client.HTTPConnection, timeout: float):
        self.conn, self.passed = conn, False
        self.timer = threading.Timer(timeout, self._shut)
        self.timer.daemon = True

    def _shut(self) -> None:
        self.passed = True
        with contextlib.suppress(OSError, AttributeError):
            self.conn.sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> _Deadline:
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        self.conn.close()


def ask(url: str, timeout: float, *, method: str = "GET", body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int | str, str]:
    """(the HTTP status, at most 4 KiB of the answer's text), or (what stood in for a status: refused, timed out, no
    answer — probes.no_answer —, why), all within `timeout` seconds from the connect to the last byte read."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return probes.NO_ANSWER, f"not an http(s) URL: {url[:200]}"
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=timeout)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    with _Deadline(conn, timeout) as deadline:
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read(4096).decode("utf-8", errors="replace")
        except (OSError, http.client.HTTPException) as exc:
            if deadline.passed:
                return probes.TIMED_OUT, f"no whole answer within {timeout:g} s"
            return probes.no_answer(exc), str(exc)[:500]
