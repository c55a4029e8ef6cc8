"""A real headless Chromium (Debian's package, /usr/bin/chromium) driven over the DevTools protocol, for
the tests that open a report as a person would: load the page from a file:// URL, collect console errors,
uncaught exceptions and every network request, evaluate a few DOM queries and take a full-page screenshot.

Only the protocol's stable domains are used (Target, Page, Runtime, Log, Network, Emulation); the
websocket client is `websockets`' synchronous one.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("MTPBENCH_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]


def chromium() -> str | None:
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


@dataclass
class PageResult:
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    screenshot: bytes = b""


class _Session:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        n = next(self.ids)
        msg: dict[str, Any] = {"id": n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        end = time.monotonic() + timeout
        while True:
            data = json.loads(self.ws.recv(timeout=max(end - time.monotonic(), 0.01)))
            if data.get("id") == n:
                if "error" in data:
                    raise RuntimeError(f"{method}: {data['error']}")
                return dict(data.get("result", {}))
            self.events.append(data)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        end = time.monotonic() + timeout
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            data = json.loads(self.ws.recv(timeout=max(end - time.monotonic(), 0.01)))
            self.events.append(data)
            if data.get("method") == method:
                return data


def open_page(path: Path, expressions: dict[str, str], width: int = 1280) -> PageResult:
    """Load `path` in headless Chromium; return console errors, requested URLs, the value of each JS
    expression and a full-page PNG screenshot."""
    from websockets.sync.client import connect

    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium not found (apt-get install chromium)")
    profile = Path(tempfile.mkdtemp(prefix="mtpbench-chromium-"))
    proc = subprocess.Popen(
        [exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        port_file = profile / "DevToolsActivePort"
        end = time.monotonic() + 60
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"chromium did not start (exit {proc.poll()})")
            time.sleep(0.05)
        port, ws_path = port_file.read_text().splitlines()[:2]
        with connect(f"ws://127.0.0.1:{port}{ws_path}", max_size=2**28) as ws:
            s = _Session(ws)
            target = s.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            sid = s.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                s.call(f"{domain}.enable", session=sid)
            s.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
                session=sid,
            )
            s.events.clear()
            s.call("Page.navigate", {"url": path.resolve().as_uri()}, session=sid)
            s.wait_for("Page.loadEventFired")
            out = PageResult()
            for name, expr in expressions.items():
                res = s.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)
                if "exceptionDetails" in res:
                    raise RuntimeError(f"{name}: {res['exceptionDetails'].get('text')}")
                out.values[name] = res["result"].get("value")
            metrics = s.call("Page.getLayoutMetrics", session=sid)
            size = metrics.get("cssContentSize") or metrics["contentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            shot = s.call(
                "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}, session=sid
            )
            out.screenshot = base64.b64decode(shot["data"])
            for ev in s.events:
                m, p = ev.get("method"), ev.get("params", {})
                if m == "Runtime.exceptionThrown":
                    out.console_errors.append(str(p.get("exceptionDetails", {}).get("text")))
                elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                    out.console_errors.append(json.dumps(p.get("args")))
                elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                    out.console_errors.append(str(p["entry"].get("text")))
                elif m == "Network.requestWillBeSent":
                    out.requests.append(str(p.get("request", {}).get("url")))
            return out
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
