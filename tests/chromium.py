"""Headless Chromium for the tests, driven over the DevTools protocol on a pipe (no library).

`--remote-debugging-pipe` makes the browser read NUL-terminated JSON commands on its fd 3 and
write replies and events on its fd 4. Every console message, uncaught exception, log entry and
network request of the page is kept, so a test can fail on any of them.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.tools import require

WAIT = 60.0  # seconds: every wait on the browser is bounded by this (the machine is loaded)


def chromium_path() -> str:
    """Debian's chromium (scripts/setup-dev installs it); the tests fail, not skip, without it."""
    return require("chromium")


class Browser:
    """One headless browser with one page, attached with a flat session."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 900) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # in the child: its fd 3 reads our commands, its fd 4 answers
            read, write = os.dup(to_browser_r), os.dup(from_browser_w)  # either may be 3 or 4
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.proc = subprocess.Popen(
            [
                chromium_path(),
                "--headless",
                "--no-sandbox",  # the tests run as root in CI containers
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire,
            pass_fds=(3, 4),  # kept open through exec (wire runs before the others are closed)
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Condition()
        self.seen: list[dict[str, Any]] = []  # every event, in order
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                with self._lock:
                    self._lock.notify_all()
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        self._replies[message["id"]] = message
                        self._lock.notify_all()
                else:
                    self.seen.append(message)
                    self._events.put(message)

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command and wait for its reply; a protocol error fails the test."""
        self._next += 1
        command: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            command["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + WAIT
        with self._lock:
            while self._next not in self._replies:
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, f"no reply to {method}"
                self._lock.wait(left)
            reply = self._replies.pop(self._next)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply.get("result", {})

    def open(self, url: str) -> None:
        """Navigate and wait for the load event (scripts have run by then)."""
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired")

    def wait_event(self, method: str) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no {method} within {WAIT}s"
            try:
                event = self._events.get(timeout=left)
            except queue.Empty:
                continue
            if event.get("method") == method:
                return event

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (an exception fails the test)."""
        result = self.call(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def screenshot(self, path: Path, selector: str | None = None) -> bytes:
        """A PNG of the window, or of the element `selector` finds."""
        params: dict[str, Any] = {"format": "png"}
        if selector is not None:
            box = self.evaluate(
                f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                ".getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()"
            )
            x, y, width, height = box
            params["clip"] = {"x": x, "y": y, "width": width, "height": height, "scale": 1}
        data = base64.b64decode(self.call("Page.captureScreenshot", session=True, **params)["data"])
        path.write_bytes(data)
        return data

    def problems(self) -> list[str]:
        """Console messages, uncaught exceptions and log entries the page produced."""
        found = []
        for event in self.seen:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled":
                texts = [str(a.get("value", a.get("description"))) for a in params["args"]]
                found.append(f"console.{params['type']}: {' '.join(texts)}")
            elif method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                found.append(
                    f"exception: {details.get('exception', {}).get('description') or details['text']}"
                )
            elif method == "Log.entryAdded":
                entry = params["entry"]
                found.append(f"log {entry['level']}: {entry['text']}")
        return found

    def requests(self) -> list[str]:
        """Every URL the page asked the network for."""
        return [
            e["params"]["request"]["url"]
            for e in self.seen
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self._next += 1
                os.write(
                    self._to_browser,
                    json.dumps({"id": self._next, "method": "Browser.close"}).encode() + b"\0",
                )
                self.proc.wait(WAIT)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._to_browser)
