"""Reward server hardening (issue 15 #11): deeply nested JSON is a counted 400, a short token off loopback is
refused, and a stuck scorer makes the server report (and answer) saturation instead of letting requests rot."""

from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from ppokit.rewards.cli import check_bind
from ppokit.rewards.server import create_app


def one_each(items):
    return [(1.0, {}) for _ in items]


@pytest.mark.parametrize("body", ["[" * 100_000 + "]" * 100_000,
                                  '{"src": ' + "[" * 100_000 + "]" * 100_000 + ', "tgt": [], "response": []}'],
                         ids=["bare", "inside-a-field"])
def test_deeply_nested_json_is_a_400_with_a_json_message_and_counted(body):
    with TestClient(create_app(one_each)) as c:
        r = c.post("/", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        assert "nested" in r.json()["error_msg"] and r.json()["error_code"] == 400
        assert c.get("/metrics").json()["status"] == {"400": 1}
        assert c.post("/", json={"src": ["a"], "tgt": [""], "response": ["b"]}).json()["score"] == [1.0]


def test_short_token_off_loopback_is_refused():
    check_bind("127.0.0.1", "short", False)  # this machine only: any token
    check_bind("0.0.0.0", "x" * 16, False)
    with pytest.raises(ValueError, match="at least 16 characters"):
        check_bind("0.0.0.0", "s3cret", False)


def test_stuck_scorer_reports_saturation_and_refuses_at_once_until_it_finishes():
    release = threading.Event()

    def stuck_on_slow(items):
        if items[0]["response"] == "slow":
            release.wait(timeout=30)
        return one_each(items)

    fast = {"src": ["a"], "tgt": [""], "response": ["fast"]}
    with TestClient(create_app(stuck_on_slow, request_timeout=0.2, max_queue=1, max_concurrent=1)) as c:
        try:
            assert c.get("/health").json()["status"] == "ok"
            r = c.post("/", json={"src": ["a"], "tgt": [""], "response": ["slow"]})
            assert r.status_code == 504  # its scoring thread still runs: the one slot is held
            health = c.get("/health")
            assert health.status_code == 503
            assert health.json()["status"] == "saturated" and health.json()["running"] == 1
            r = c.post("/", json=fast)
            assert r.status_code == 503 and "saturated" in r.json()["error_msg"]  # at once, not a 504 later
        finally:
            release.set()
        for _ in range(300):  # bounded: the slow thread ends right after release
            if c.get("/health").status_code == 200:
                break
            time.sleep(0.01)
        assert c.get("/health").json()["status"] == "ok"
        assert c.post("/", json=fast).json()["score"] == [1.0]
        assert c.get("/metrics").json()["status"] == {"200": 1, "503": 1, "504": 1}
