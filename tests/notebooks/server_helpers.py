"""The reward server on a free loopback port, in a thread of the test process (as notebook 03 runs it)."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import httpx
import uvicorn


@contextmanager
def reward_server(app):
    """Serve the FastAPI `app` on 127.0.0.1:<free port>; yields its URL; stops it on exit."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # bounded wait for the server to answer
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise AssertionError(f"the reward server on {url} did not start")
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
