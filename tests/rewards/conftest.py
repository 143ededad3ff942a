"""Shared helpers for the reward tests: a fake task registry and a real uvicorn server on loopback."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn


class EchoTask:
    """score = 1.0 when the response equals the label (after strip), else 0.0; details say which."""

    def __init__(self, name: str, bonus: float = 0.0):
        self.name = name
        self.bonus = bonus
        self.seen: list[dict] = []

    def generate(self, n, seed, **difficulty):
        return [{"prompt": f"say {i}", "label": str(i), "task": self.name, "source": f"gen:{i}", "fields": {}}
                for i in range(n)]

    def score(self, response, record, details=False):
        self.seen.append(record)
        value = (1.0 if response.strip() == (record.get("label") or "") else 0.0) + self.bonus
        return (value, {"match": value > self.bonus, "task_name": self.name}) if details else value


@pytest.fixture
def fake_tasks():
    """A registry {name: EchoTask} and its `get` (raising KeyError with the known names)."""
    registry = {
        "knights_knaves": EchoTask("knights_knaves", bonus=2.0),
        "arithmetic": EchoTask("arithmetic"),
        "countdown": EchoTask("countdown", bonus=10.0),
    }

    def get(name):
        if name not in registry:
            raise KeyError(f"unknown task {name!r}; known: {sorted(registry)}")
        return registry[name]

    return registry, get


@contextmanager
def serve(app):
    """Run `app` on uvicorn in a thread on a free 127.0.0.1 port; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(1000):  # bounded wait for startup
        if server.started or not thread.is_alive():
            break
        time.sleep(0.01)
    assert server.started, "the test server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def dead_url() -> str:
    """A loopback URL where nothing listens (the port was bound, then released)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def live_server():
    """`with live_server(app) as url:` runs the app on a real loopback socket."""
    return serve


@pytest.fixture
def closed_port_url():
    return dead_url()
