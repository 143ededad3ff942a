"""The one signal rule (issue 47, class 2), driven as a user does: run_ppo.py as a real process, a real signal.

A first SIGTERM starts no new work (a SIGTERM during an evaluation does not train one more step); a second SIGTERM
stops every mode within seconds with exit 143 and one sentence about the signal, never blaming the reward
function; Ctrl-C twice stops the producer thread's run with 130. The waits are bounded generously: the hangs these
tests guard against took minutes (297 s for the producer thread with a slow reward). The default suite runs the
three cases of the issue (inline and thread-producer second SIGTERM, SIGTERM during evaluation); Ctrl-C twice, the
checkpoint after an evaluation and a judge call are `slow`. A slow tool: tests/tools/test_tool_isolation.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from checkpoint_helpers import REPO, child_env, tiny_config, write_config

from ppokit.checkpoint import complete_checkpoints

STOP_WITHIN_S = 30  # after the second signal; the bugs took 58 s (Ctrl-C twice) to 297 s (SIGTERM twice)

# The reward writes PPOKIT_TEST_MARKER and sleeps 600 s at the call that scores prompts containing
# PPOKIT_TEST_PAUSE_ON (an eval prompt, or any prompt at call PPOKIT_TEST_AT_CALL).
SLOW_REWARD = '''
import os, time
from pathlib import Path

CALLS = [0]


def distinct_chars(prompts, responses, **fields):
    CALLS[0] += 1
    on, at = os.environ.get("PPOKIT_TEST_PAUSE_ON"), int(os.environ.get("PPOKIT_TEST_AT_CALL", "0"))
    if (on and any(on in p for p in prompts)) or CALLS[0] == at:
        Path(os.environ["PPOKIT_TEST_MARKER"]).write_text(str(CALLS[0]))
        time.sleep(600)
    return [float(len(set(r))) for r in responses]
'''


def slow_config(model: str, folder: Path, **extra) -> str:
    config = tiny_config(model, folder, **{"max_steps": 6, "save_steps": 2, **extra})
    (folder / "reward.py").write_text(SLOW_REWARD)
    return write_config(folder, config)


def start(config: str, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "run_ppo.py"), config], cwd=REPO, env=child_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(marker: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) first:\n{proc.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"{marker} did not appear"
        time.sleep(0.05)


def signal_twice(proc: subprocess.Popen, signum: int) -> tuple[int, str, float]:
    """Two signals 1 s apart; (exit status, stderr, seconds from the second signal to the exit)."""
    proc.send_signal(signum)
    time.sleep(1.0)
    proc.send_signal(signum)
    second = time.monotonic()
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"still running 120 s after the second signal:\n{err[-3000:]}") from None
    return proc.returncode, err, time.monotonic() - second


def assert_stopped_at_once(code: int, err: str, elapsed: float, out: Path) -> None:
    assert code == 143, err[-3000:]
    assert "SIGTERM: finishing this step" in err, err[-3000:]
    assert "stopped at once by a second SIGTERM" in err, err[-3000:]
    assert "fix the function" not in err and "Traceback" not in err, err[-3000:]
    newest = complete_checkpoints(out)
    where = f"newest complete checkpoint is {newest[-1]}" if newest else "no checkpoint had been written yet"
    assert where in err, err[-3000:]
    assert elapsed < STOP_WITHIN_S, f"exit {elapsed:.0f} s after the second SIGTERM"


@pytest.mark.parametrize("mode", [
    dict(),  # the inline producer, synchronous
    dict(staleness_threshold=1, rollout_is="token", async_producer="thread"),  # the reward runs in the worker
], ids=["inline", "thread-k1"])
def test_a_second_sigterm_during_a_slow_reward_stops_at_once_with_143(tiny_model_dir, tmp_path, mode):
    config = slow_config(tiny_model_dir, tmp_path, **mode)
    marker = tmp_path / "marker"
    proc = start(config, PPOKIT_TEST_AT_CALL="4", PPOKIT_TEST_MARKER=str(marker))
    wait_for(marker, proc)
    code, err, elapsed = signal_twice(proc, signal.SIGTERM)
    assert_stopped_at_once(code, err, elapsed, tmp_path / "out")


@pytest.mark.slow  # one more run_ppo.py process (make test-slow)
def test_ctrl_c_twice_stops_the_producer_threads_run_with_130(tiny_model_dir, tmp_path):
    config = slow_config(tiny_model_dir, tmp_path, staleness_threshold=1, rollout_is="token", async_producer="thread")
    marker = tmp_path / "marker"
    proc = start(config, PPOKIT_TEST_AT_CALL="4", PPOKIT_TEST_MARKER=str(marker))
    wait_for(marker, proc)
    code, err, elapsed = signal_twice(proc, signal.SIGINT)
    assert code == 130, err[-3000:]
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err and "fix the function" not in err, err[-3000:]
    assert elapsed < STOP_WITHIN_S, f"exit {elapsed:.0f} s after the second Ctrl-C"


def last_step(out: Path) -> int:
    """The last step metrics.jsonl has a row for (an evaluation's row repeats its step)."""
    return max(json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines())


def eval_config(model: str, folder: Path) -> str:
    (folder / "eval.jsonl").write_text("".join(json.dumps({"prompt": f"EVAL {i}:"}) + "\n" for i in range(4)))
    return slow_config(model, folder, do_eval=True, eval_steps=2, eval_datasets=str(folder / "eval.jsonl"),
                       save_steps=10)


def test_a_sigterm_during_evaluation_checkpoints_without_training_another_step(tiny_model_dir, tmp_path):
    config, out, marker = eval_config(tiny_model_dir, tmp_path), tmp_path / "out", tmp_path / "marker"
    proc = start(config, PPOKIT_TEST_PAUSE_ON="EVAL", PPOKIT_TEST_MARKER=str(marker))
    wait_for(marker, proc)  # the evaluation after step 2 scores its answers
    proc.send_signal(signal.SIGTERM)
    # The reward sleeps 600 s: a second SIGTERM ends it; the first alone must not have started step 3.
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "stopped at once by a second SIGTERM" in err, err[-3000:]
    assert last_step(out) == 2, "a step was trained after the SIGTERM that arrived during the evaluation"


@pytest.mark.slow  # one more run_ppo.py process (make test-slow)
def test_a_sigterm_during_evaluation_stops_after_it_with_a_checkpoint(tiny_model_dir, tmp_path):
    config, out, marker = eval_config(tiny_model_dir, tmp_path), tmp_path / "out", tmp_path / "marker"
    # The first evaluation's scoring pauses 3 s (call 3: steps 1 and 2 score with calls 1 and 2), then finishes.
    reward = (tmp_path / "reward.py").read_text().replace("time.sleep(600)", "time.sleep(3)")
    (tmp_path / "reward.py").write_text(reward)
    proc = start(config, PPOKIT_TEST_AT_CALL="3", PPOKIT_TEST_MARKER=str(marker))
    wait_for(marker, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-3000:]
    assert f"stopped by SIGTERM after step 2: wrote {out / 'checkpoint-2'}" in err, err[-3000:]
    assert last_step(out) == 2
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-2"]


class SlowJudge(BaseHTTPRequestHandler):
    """An OpenAI-compatible judge endpoint that takes 600 s to answer (after writing the marker)."""

    marker: Path

    def do_POST(self):  # noqa: N802 - http.server's name
        self.marker.write_text("judging")
        time.sleep(600)

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_judge(tmp_path):
    handler = type("Handler", (SlowJudge,), {"marker": tmp_path / "marker"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.mark.slow  # one more run_ppo.py process (make test-slow)
def test_a_second_sigterm_during_a_judge_call_stops_at_once(tiny_model_dir, tmp_path, slow_judge):
    config = json.loads(Path(slow_config(tiny_model_dir, tmp_path)).read_text())
    config.pop("reward_functions")
    config.update(judge_model=slow_judge, judge_api_model="slow", reward_timeout=600)
    proc = start(write_config(tmp_path, config))
    wait_for(tmp_path / "marker", proc)
    code, err, elapsed = signal_twice(proc, signal.SIGTERM)
    assert_stopped_at_once(code, err, elapsed, tmp_path / "out")

