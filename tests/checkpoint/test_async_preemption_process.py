"""run_ppo.py in asynchronous mode (staleness_threshold k > 0, hf engine) as a real process, issue 37: SIGTERM
writes a checkpoint that holds the queue of produced, not yet consumed batches and exits 143; SIGKILL after a
periodic checkpoint loses everything after it. Either way `--resume_from_checkpoint auto` ends bitwise where the
uninterrupted run ends, with the same metrics (all but the per-process timings, throughput and memory).

The kill points are deterministic: the reward function's N-th call writes a marker file and waits (the rollout of
batch i scores with call i + 1, and with k > 0 the step that consumes batch j produces batch j + k first).
The in-process variants of the default suite are tests/checkpoint/test_async_train_resume.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch
from checkpoint_helpers import (
    assert_bitwise_equal,
    metrics_rows,
    run_and_kill_when,
    run_ppo,
    tail,
    weights,
)
from test_preemption_process import config_with_pause, signal_at_marker, start

from ppokit.checkpoint import MANIFEST_FILE, complete_checkpoints

pytestmark = pytest.mark.slow  # ~20 run_ppo.py processes of a few seconds each

MODES = {  # name: the run's async keys
    "k1": dict(staleness_threshold=1, rollout_is="token"),
    "k2": dict(staleness_threshold=2, rollout_is="token"),
    "k1-thread": dict(staleness_threshold=1, rollout_is="token", async_producer="thread"),
}


def async_config(model: str, folder: Path, mode: str) -> str:
    """6 steps of the tiny GRPO run, a checkpoint every 2; the reward pauses at a call when the test asks."""
    return config_with_pause(model, folder, max_steps=6, save_steps=2, **MODES[mode])


def call_during_step(step: int, mode: str) -> int:
    """The reward call that scores the batch produced at the start of (or beside) `step` (1-based): step 1
    produces batches 0..k, step s > 1 produces batch s - 1 + k, and batch i is scored by call i + 1."""
    return step + MODES[mode]["staleness_threshold"]


@pytest.fixture(scope="module", params=list(MODES))
def reference(request, tiny_model_dir, tmp_path_factory) -> tuple[str, Path]:
    """The uninterrupted 6-step run of each mode."""
    mode = request.param
    folder = tmp_path_factory.mktemp(f"reference-{mode}")
    run_ppo(async_config(tiny_model_dir, folder, mode))
    out = folder / "out"
    rows = metrics_rows(out)
    k = MODES[mode]["staleness_threshold"]
    assert sorted(rows) == list(range(1, 7))
    assert [rows[s]["async/version_lag/max"] for s in range(1, 7)] == [min(s - 1, k) for s in range(1, 7)]
    assert len({row["reward/mean"] for row in rows.values()}) > 1  # the reward varies: the steps update the model
    return mode, out


def assert_same_run(reference: Path, out: Path, resumed_at: int) -> None:
    """The final weights bitwise equal, every metric row after the resume equal (timings aside)."""
    assert_bitwise_equal(weights(reference), weights(out))
    ref_rows, rows = metrics_rows(reference), metrics_rows(out)
    assert sorted(rows) == list(range(1, 7))
    for step in range(1, 7):
        assert rows[step] == ref_rows[step], (step, {k: (rows[step].get(k), ref_rows[step].get(k))
                                                     for k in set(rows[step]) | set(ref_rows[step])
                                                     if rows[step].get(k) != ref_rows[step].get(k)})
    assert any(rows[s]["async/version_lag/max"] > 0 for s in range(resumed_at + 1, 7))


def assert_holds_the_queue(checkpoint: Path, mode: str) -> None:
    """The checkpoint lists and holds the queued batches: k of them, made by versions step - k .. step - 1."""
    k, step = MODES[mode]["staleness_threshold"], int(checkpoint.name.split("-")[1])
    assert "state_rollout_queue_0.pt" in (checkpoint / MANIFEST_FILE).read_text()
    state = torch.load(checkpoint / "state_rollout_queue_0.pt", weights_only=False)
    assert (state["produced"], state["consumed"]) == (step + k, step)
    assert [int(b.policy_version.max()) for b in state["queue"]] == [step + j - k for j in range(k)]


def test_sigterm_in_async_mode_checkpoints_the_queue_and_the_resume_equals_the_uninterrupted_run(
        reference, tiny_model_dir, tmp_path):
    mode, ref = reference
    config = async_config(tiny_model_dir, tmp_path, mode)
    out, marker = tmp_path / "out", tmp_path / "marker"
    call = call_during_step(3, mode)  # SIGTERM while step 3's batch is scored: the step finishes, then the save
    proc = start(config, PPOKIT_TEST_AT_CALL=str(call), PPOKIT_TEST_MARKER=str(marker), PPOKIT_TEST_PAUSE="2")
    code, err = signal_at_marker(proc, marker, signal.SIGTERM)
    assert code == 143, err[-3000:]
    assert f"stopped by SIGTERM after step 3: wrote {out / 'checkpoint-3'}" in err, err[-3000:]
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-2", "checkpoint-3"]
    assert_holds_the_queue(out / "checkpoint-3", mode)
    done = run_ppo(config, "--resume_from_checkpoint", "auto")
    assert f"resumed from {out / 'checkpoint-3'} at step 3" in done.stderr, tail(done)
    assert_same_run(ref, out, resumed_at=3)


def test_sigkill_after_a_periodic_checkpoint_resumes_from_it_as_the_uninterrupted_run(
        reference, tiny_model_dir, tmp_path):
    mode, ref = reference
    config = async_config(tiny_model_dir, tmp_path, mode)
    out, blocked = tmp_path / "out", tmp_path / "blocked"
    # step 4's batch blocks in its reward: checkpoint-2 is the newest and step 3 is logged after it
    run_and_kill_when(config, blocked, PPOKIT_TEST_AT_CALL=str(call_during_step(4, mode)),
                      PPOKIT_TEST_MARKER=str(blocked), PPOKIT_TEST_PAUSE="600")
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-2"]
    assert max(metrics_rows(out)) == 3
    assert_holds_the_queue(out / "checkpoint-2", mode)
    done = run_ppo(config, "--resume_from_checkpoint", "auto")
    assert f"resumed from {out / 'checkpoint-2'} at step 2" in done.stderr, tail(done)
    assert_same_run(ref, out, resumed_at=2)

