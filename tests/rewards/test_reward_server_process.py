"""`python reward_server.py` as a real process on loopback, driven by the client."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.rewards import RewardServerError
from ppokit.rewards.client import RewardServerClient
from ppokit.testing import wait_until_serving

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("ppokit.tasks")


def test_reward_server_script_serves_paddle_protocol_with_a_token(closed_port_url):
    url = closed_port_url  # a free port, now bound by the server process
    port = url.rsplit(":", 1)[1]
    env = {**os.environ, "PPOKIT_REWARD_TOKEN": "proc-token"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "reward_server.py"), "--port", port, "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until_serving(proc, url)
        client = RewardServerClient(url, token="proc-token", max_retries=0)
        prompt = "What is 5 + 2? Answer with just the number."
        assert client([prompt, prompt], ["7", "8"], label=["7", "7"]) == [1.0, 0.0]
        with pytest.raises(RewardServerError, match="HTTP 401"):
            RewardServerClient(url, token="other", max_retries=0)([prompt], ["7"], label=["7"])
    finally:
        proc.terminate()
        proc.wait(timeout=20)
