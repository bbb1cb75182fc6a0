"""Headless Chromium driven over the DevTools protocol, for page tests.

Chromium's ``--dump-dom`` / ``--screenshot`` switches cannot carry a session
cookie, and the metrics page is behind Airflow's login; so the browser is
started with a DevTools port and driven directly: set the cookie the Airflow
UI would hold, open the page, wait until its script has rendered, read the DOM
and take a screenshot. Only the standard library and ``websockets`` (already
an Airflow dependency) are used.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from flowctl.services.process import free_port

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-allow-origins=*",
)


def chromium_binary() -> str:
    """``chromium`` on PATH, installed from Debian if missing (the test machine is root)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    found = shutil.which("chromium")
    if not found:
        raise RuntimeError("apt-get installed chromium but no `chromium` is on PATH")
    return found


class Page:
    """One browser tab: send DevTools commands and wait for their answers."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws
        self._ids = itertools.count(1)

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        self._ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"DevTools {method} got no answer in {timeout:.0f} s")
            reply = json.loads(self._ws.recv(timeout=remaining))
            if reply.get("id") != message_id:
                continue  # an event; not what we wait for
            if "error" in reply:
                raise RuntimeError(f"DevTools {method} failed: {reply['error']}")
            return reply.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float) -> Any:
        """Poll a JavaScript expression until it is truthy; its value, or TimeoutError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"{expression!r} still falsy after {timeout:.0f} s")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))


def _page_target(port: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                targets = json.loads(r.read())
            for target in targets:
                if target.get("type") == "page":
                    return str(target["webSocketDebuggerUrl"])
        except OSError as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"Chromium's DevTools on port {port} did not answer in {timeout} s: {last}")


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator[Page]:
    """A headless Chromium with one blank tab; stopped (its whole process group) on exit."""
    port = free_port()
    profile = tempfile.mkdtemp(prefix="flowctl-chromium-")
    process = subprocess.Popen(
        [
            chromium_binary(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--remote-debugging-port={port}",
            f"--window-size={width},{height}",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: renderers stop with it
    )
    try:
        with connect(_page_target(port, timeout=30), max_size=None, open_timeout=10) as ws:
            page = Page(ws)
            page.call("Page.enable")
            page.call("Network.enable")
            yield page
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
