"""run_ppo.py as a real process (issue 25): SIGTERM checkpoints and exits 143, `auto` continues from it;
SIGINT (Ctrl-C) during a reward function exits 130 with one sentence; a diverged run exits 2, never 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from checkpoint_helpers import REPO, child_env, tail, tiny_config, write_config

from ppokit.checkpoint import complete_checkpoints
from ppokit.checkpoint.lock import LOCK_FILE

# Call N writes PPOKIT_TEST_MARKER and then takes PPOKIT_TEST_PAUSE seconds, so a test can signal the run
# while that step's reward is being computed.
PAUSING_REWARD = '''
import os, time
from pathlib import Path

CALLS = [0]


def distinct_chars(prompts, responses, **fields):
    CALLS[0] += 1
    if CALLS[0] == int(os.environ.get("PPOKIT_TEST_AT_CALL", "0")):
        Path(os.environ["PPOKIT_TEST_MARKER"]).write_text("here")
        time.sleep(float(os.environ["PPOKIT_TEST_PAUSE"]))
    return [float(len(set(r))) for r in responses]
'''


def config_with_pause(model: str, folder: Path, **extra) -> str:
    config = tiny_config(model, folder, **extra)
    (folder / "reward.py").write_text(PAUSING_REWARD)
    return write_config(folder, config)


def start(config: str, *argv: str, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "run_ppo.py"), config, *argv], cwd=REPO,
                            env=child_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_from_a_terminal)


def _as_from_a_terminal() -> None:
    """The run starts with Ctrl-C's default action, as from a terminal: a suite started as a shell's background job
    (`make test &`, nohup) has SIGINT ignored, the child would inherit that, and Python then keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_at_marker(proc: subprocess.Popen, marker: Path, signum: int, timeout: float = 300) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    while not marker.exists():
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) first:\n{proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"{marker} did not appear"
        time.sleep(0.05)
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def test_sigterm_checkpoints_exits_143_and_auto_resumes(tiny_model_dir, tmp_path):
    config = config_with_pause(tiny_model_dir, tmp_path, max_steps=4, save_steps=10)
    out, marker = tmp_path / "out", tmp_path / "marker"
    proc = start(config, PPOKIT_TEST_AT_CALL="2", PPOKIT_TEST_MARKER=str(marker), PPOKIT_TEST_PAUSE="2")
    code, err = signal_at_marker(proc, marker, signal.SIGTERM)  # during step 2's reward
    assert code == 143, err[-3000:]
    assert f"stopped by SIGTERM after step 2: wrote {out / 'checkpoint-2'}" in err
    assert "Traceback" not in err
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-2"]
    assert not list(out.glob(".tmp-checkpoint-*")) and not (out / LOCK_FILE).exists()
    done = subprocess.run([sys.executable, str(REPO / "run_ppo.py"), config, "--resume_from_checkpoint", "auto"],
                          cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, tail(done)
    assert f"resumed from {out / 'checkpoint-2'} at step 2" in done.stderr, tail(done)
    assert (out / "config.json").is_file()


def test_ctrl_c_during_a_reward_function_exits_130_with_one_sentence(tiny_model_dir, tmp_path):
    config = config_with_pause(tiny_model_dir, tmp_path, max_steps=4, save_steps=1)
    out, marker = tmp_path / "out", tmp_path / "marker"
    proc = start(config, PPOKIT_TEST_AT_CALL="2", PPOKIT_TEST_MARKER=str(marker), PPOKIT_TEST_PAUSE="600")
    code, err = signal_at_marker(proc, marker, signal.SIGINT)
    assert code == 130, err[-3000:]
    assert "interrupted (Ctrl-C)" in err and f"newest complete checkpoint is {out / 'checkpoint-1'}" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "fix the function" not in err
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-1"]


def test_a_diverged_run_exits_2_with_a_sentence(tiny_model_dir, tmp_path):
    config = write_config(tmp_path, tiny_config(tiny_model_dir, tmp_path, learning_rate=1e30, max_steps=3,
                                                save_steps=10, warmup_ratio=0.0, lr_scheduler_type="constant"))
    done = subprocess.run([sys.executable, str(REPO / "run_ppo.py"), config], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, tail(done)
    assert "error: " in done.stderr and "Traceback" not in done.stderr, tail(done)
    assert not list((tmp_path / "out").glob("*.safetensors"))
