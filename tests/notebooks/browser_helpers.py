"""A headless Chromium driven over the DevTools protocol, and a VisualDL server, for the browser test."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what: str, timeout: float = 60.0, every: float = 0.2):
    """Call `check` until it returns a truthy value (returned) or `timeout` seconds pass (AssertionError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@contextmanager
def visualdl(logdir: Path, *extra: str):
    """`visualdl --logdir LOGDIR [EXTRA ...]` on a free loopback port; yields its base URL."""
    port = free_port()
    exe = Path(sys.executable).with_name("visualdl")
    cmd = [str(exe), "--logdir", str(logdir), "--host", "127.0.0.1", "--port", str(port), "--disable-telemetry",
           "--language", "en", *extra]  # without a language VisualDL's pages fail for clients with no Accept-Language
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"

    def up():
        if proc.poll() is not None:
            raise AssertionError(f"visualdl exited: {proc.stdout.read()}")
        try:
            return httpx.get(f"{url}/app/api/runs", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, "visualdl to answer")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


class Page:
    """One Chromium tab over the DevTools protocol (websocket-client)."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path


@contextmanager
def chromium_page(profile: Path):
    """A headless Chromium with one blank tab; yields a Page."""
    import websocket

    proc = subprocess.Popen([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        wait_for(lambda: port_file.is_file() and port_file.read_text().strip(), "Chromium's DevTools port")
        port = port_file.read_text().split()[0]
        tabs = wait_for(lambda: [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json()
                                 if t.get("type") == "page"], "a Chromium tab")
        ws = websocket.create_connection(tabs[0]["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        try:
            yield Page(ws)
        finally:
            ws.close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


SEARCH_TAGS = """(() => {
  const input = document.querySelector('input[placeholder*="Search tags"]');
  if (!input) return false;
  const setter = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
  setter.call(input, %s);
  input.dispatchEvent(new Event('input', {bubbles: true}));
  return true;
})()"""
