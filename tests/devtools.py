"""A real headless Chromium driven over its DevTools protocol (a websocket of JSON commands): one tab of a browser
started once, for the tests that look at many pages. Starting Chromium for each page (`--dump-dom`) cost about
1.2 s of CPU a page; a page loaded in a running browser costs a fraction of that."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


class Page:
    """One Chromium tab over the DevTools protocol."""

    def __init__(self, debug_port: int):
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{debug_port}/json", timeout=10))
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self.next_id = 0

    def send(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    def js(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        self.ws.close()


class Browser:
    """A headless Chromium started with `flags` and a DevTools port, and its first tab (`page`)."""

    def __init__(self, chromium: str, flags: list[str], profile: Path, *, window: str = "1400,1000"):
        port, self.loads = free_port(), 0
        # a Chromium stopped by a signal leaves its singleton socket's folder in $TMPDIR (/tmp/org.chromium.Chromium.*,
        # 40-odd a test run, never removed): give it a $TMPDIR of its own, removed by close() — a short one, as a
        # socket's path must fit in 108 bytes (one under a test's tmp_path does not, and the browser never starts)
        self.tmpdir = tempfile.mkdtemp(prefix="chromium-")
        self.proc = subprocess.Popen([chromium, *flags, f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
                                      "--remote-allow-origins=*", f"--window-size={window}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                     env={**os.environ, "TMPDIR": self.tmpdir})
        try:
            wait_for("chromium's DevTools port", lambda: http_ok(f"http://127.0.0.1:{port}/json/version"), 60, 0.1)
            self.page = Page(port)
            self.page.send("Page.enable")
        except BaseException:
            self.close()
            raise

    def read(self, url: str, width: int, height: int, attribute: str, timeout: float = 60) -> str:
        """Load `url` in a `width` × `height` px viewport and return the value its page script sets as `attribute`
        on <body> once it has measured the page (the probes of the layout tests)."""
        self.page.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                       mobile=False)
        self.loads += 1
        url = f"{url}?load={self.loads}"  # the old page's value must not answer for the new one, the same file or not
        self.page.send("Page.navigate", url=url)
        ask = f"document.URL === {json.dumps(url)} && document.body && document.body.getAttribute({json.dumps(attribute)})"

        def answer():
            try:
                return self.page.js(ask)
            except AssertionError:  # asked while the old page's context was torn down: ask again
                return None
        return wait_for(f"{attribute} on {url}", answer, timeout, 0.05)

    def close(self) -> None:
        if getattr(self, "page", None) is not None:
            self.page.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        shutil.rmtree(self.tmpdir, ignore_errors=True)
