"""Headless Chromium for tests, driven over the DevTools protocol on a pipe.

    with open_page("report.html") as page:     # ChromiumUnavailable: no browser to start
        page.errors                            # console errors, exceptions, error log entries
        page.evaluate("document.title")        # a JavaScript expression's value
        page.screenshot("artifacts/report.png")

The browser (Debian's ``chromium``) starts with ``--remote-debugging-pipe``: it reads
commands from file descriptor 3 and writes replies and events to 4, each message one JSON
object followed by a NUL byte. Every wait has a deadline; the browser and everything it
started (one process group) are killed on the way out, and its profile directory removed.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional

TIMEOUT = 30.0
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-pipe"]


class ChromiumUnavailable(RuntimeError):
    """No Chromium here, or it would not start and answer."""


class ChromiumError(RuntimeError):
    """The browser answered a command with an error, or did not answer in time."""


def find_chromium() -> Optional[str]:
    """The Chromium executable: ``/usr/bin/chromium``, else ``chromium`` on PATH."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


# The browser must find its pipe on fds 3 and 4: bash (dash takes fds 0-9 only) moves the
# ends there (from fds numbered 10 and up, so that the moves cannot overwrite each other)
# and execs the browser.
_EXEC_ON_3_AND_4 = 'exec "$0" "$@" 3<&{r} 4>&{w} {r}<&- {w}>&-'


class Browser:
    """A running headless Chromium and one page (a target attached in flat mode)."""

    def __init__(self, executable: str, width: int = 1400, height: int = 900):
        self.profile = tempfile.mkdtemp(prefix="tograph-chromium-")
        self.log = open(os.path.join(self.profile, "stderr.log"), "w+b")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child_r, from_child_w)]
        for fd in (to_child_r, from_child_w):
            os.close(fd)
        self._buffer, self._events, self._next_id = b"", [], 0
        self.session: Optional[str] = None
        shell = _EXEC_ON_3_AND_4.format(r=ends[0], w=ends[1])
        try:
            self.proc = subprocess.Popen(
                [shutil.which("bash") or "/bin/bash", "-c", shell, executable, *FLAGS,
                 f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                 "about:blank"],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, pass_fds=ends,
                start_new_session=True)
        except OSError as e:
            self.close()
            raise ChromiumUnavailable(f"cannot start {executable}: {e}") from e
        finally:
            for fd in ends:
                os.close(fd)
        try:
            self.call("Browser.getVersion")
        except (ChromiumError, OSError) as e:
            self.close()
            raise ChromiumUnavailable(f"{executable} started but did not answer: {e}") from e

    # -- the wire
    def _send(self, method: str, params: Optional[dict], session: Optional[str]) -> int:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        deadline = time.monotonic() + TIMEOUT
        while data:
            if not select.select([], [self._to_child], [], self._left(deadline))[1]:
                raise ChromiumError(f"timed out sending {method}{self._tail()}")
            data = data[os.write(self._to_child, data):]
        return self._next_id

    def _receive(self, deadline: float) -> Dict[str, Any]:
        while b"\0" not in self._buffer:
            if not select.select([self._from_child], [], [], self._left(deadline))[0]:
                raise ChromiumError(f"timed out waiting for the browser{self._tail()}")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise ChromiumError(f"the browser closed its pipe{self._tail()}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())

    def _tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        text = self.log.read().decode("utf-8", "replace").strip()
        return f"\nbrowser log (end):\n{text[-2000:]}" if text else ""

    # -- commands and events
    def call(self, method: str, params: Optional[dict] = None, page: bool = False) -> dict:
        """Send a command (to the page's session when ``page``) and wait for its result;
        events that arrive meanwhile are kept for ``wait_for`` and ``events``."""
        ident = self._send(method, params, self.session if page else None)
        deadline = time.monotonic() + TIMEOUT
        while True:
            message = self._receive(deadline)
            if message.get("id") == ident:
                if "error" in message:
                    raise ChromiumError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self._events.append(message)

    def wait_for(self, event: str) -> dict:
        """The first event named ``event`` (already received or still to come)."""
        deadline = time.monotonic() + TIMEOUT
        seen = 0
        while True:
            for message in self._events[seen:]:
                if message["method"] == event:
                    return message.get("params", {})
            seen = len(self._events)
            message = self._receive(deadline)
            if "method" in message:
                self._events.append(message)

    def forget_events(self) -> None:
        self._events.clear()

    def events(self, *names: str) -> List[dict]:
        return [m.get("params", {}) for m in self._events if m["method"] in names]

    def open_page(self) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", page=True)

    def close(self) -> None:
        """Ask the browser to quit, then kill its process group; remove the profile."""
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(Exception):
                self._send("Browser.close", None, None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)      # renderers, zygote, utilities
            proc.wait(timeout=10)
        for fd in (getattr(self, "_to_child", None), getattr(self, "_from_child", None)):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    """A loaded page: its console errors, JavaScript evaluation, screenshots."""

    def __init__(self, browser: Browser):
        self.browser = browser

    @property
    def errors(self) -> List[str]:
        """Console errors and failed assertions, uncaught exceptions, error log entries."""
        out = []
        for e in self.browser.events("Runtime.consoleAPICalled"):
            if e.get("type") in ("error", "assert"):
                out.append("console." + e["type"] + ": " + " ".join(
                    str(a.get("value", a.get("description", ""))) for a in e.get("args", [])))
        for e in self.browser.events("Runtime.exceptionThrown"):
            details = e.get("exceptionDetails", {})
            out.append("exception: " + str(details.get("exception", {}).get(
                "description", details.get("text", ""))))
        for e in self.browser.events("Log.entryAdded"):
            entry = e.get("entry", {})
            if entry.get("level") == "error":
                out.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
        return out

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (JSON-like values come back as Python)."""
        result = self.browser.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True}, page=True)
        if "exceptionDetails" in result:
            raise ChromiumError(f"evaluating {expression[:80]!r}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def screenshot(self, path: str) -> str:
        """Save a PNG of the whole page (not only the window) to ``path``."""
        size = self.browser.call("Page.getLayoutMetrics", page=True)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        data = self.browser.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True, "clip": clip}, page=True)["data"]
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path


@contextlib.contextmanager
def open_page(path: str, width: int = 1400, height: int = 900):
    """Load the local file ``path`` in a fresh headless Chromium; yield its ``Page``."""
    executable = find_chromium()
    if executable is None:
        raise ChromiumUnavailable("no chromium executable (install Debian's 'chromium' "
                                  "package; 'bash .ci/setup' does when it can)")
    browser = Browser(executable, width, height)
    try:
        browser.open_page()
        browser.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            page=True)
        url = "file://" + os.path.abspath(path)
        browser.forget_events()               # about:blank's, not the page's
        navigated = browser.call("Page.navigate", {"url": url}, page=True)
        if navigated.get("errorText"):
            raise ChromiumError(f"cannot load {url}: {navigated['errorText']}")
        browser.wait_for("Page.loadEventFired")
        yield Page(browser)
    finally:
        browser.close()
