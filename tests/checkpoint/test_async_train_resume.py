"""`Session.train()` in asynchronous mode, in one process (issue 37; the real-process variants are
tests/checkpoint/test_async_preemption_process.py, marked slow): a SIGTERM during a step lets it finish, writes a
checkpoint holding the queue and stops; a run that dies after a periodic checkpoint resumes from it. Either way the
resumed run ends with the weights and metrics of the uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from checkpoint_helpers import assert_bitwise_equal, metrics_rows, tiny_config, weights

from ppokit.args import load_arguments
from ppokit.checkpoint import complete_checkpoints
from ppokit.checkpoint.run import Preempted
from ppokit.session import Session

# The N-th call (counted per file: every run folder has its own) sends SIGTERM to this process, or raises,
# when the test's environment asks for it; the scores are the ones of checkpoint_helpers' reward.
REWARD = '''
import os, signal

CALLS = [0]


class Died(BaseException):
    """Stands in for SIGKILL: nothing after it runs, not even a reward-failure sentence."""


def distinct_chars(prompts, responses, **fields):
    CALLS[0] += 1
    if CALLS[0] == int(os.environ.get("PPOKIT_TEST_SIGTERM_AT", "0")):
        os.kill(os.getpid(), signal.SIGTERM)
    if CALLS[0] == int(os.environ.get("PPOKIT_TEST_DIE_AT", "0")):
        raise Died("the process died")
    return [float(len(set(r))) for r in responses]
'''

MODES = {"k1": dict(staleness_threshold=1), "k2-thread": dict(staleness_threshold=2, async_producer="thread")}


def config(model: str, folder: Path, mode: str, **extra) -> dict:
    cfg = tiny_config(model, folder, max_steps=5, save_steps=2, rollout_is="token", **MODES[mode], **extra)
    (folder / "reward.py").write_text(REWARD)
    return cfg


def train(cfg: dict) -> Session:
    s = Session(load_arguments(None, overrides=cfg))
    s.train()
    return s


@pytest.fixture(scope="module", params=list(MODES))
def reference(request, tiny_model_dir, tmp_path_factory) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp(f"reference-{request.param}")
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as the tests' own runs (conftest's one_thread starts after module fixtures)
    try:
        train(config(tiny_model_dir, folder, request.param))
    finally:
        torch.set_num_threads(before)
    return request.param, folder / "out"


def assert_same_run(reference: Path, out: Path, k: int) -> None:
    assert_bitwise_equal(weights(reference), weights(out))
    ref_rows, rows = metrics_rows(reference), metrics_rows(out)
    assert sorted(rows) == sorted(ref_rows) == [1, 2, 3, 4, 5]
    for step in ref_rows:
        assert rows[step] == ref_rows[step], step
    assert rows[5]["async/version_lag/max"] == k  # the queue was in use after the resume


def test_sigterm_checkpoints_the_queue_and_the_resumed_train_equals_the_uninterrupted_one(
        reference, tiny_model_dir, tmp_path, monkeypatch):
    mode, ref = reference
    k = MODES[mode]["staleness_threshold"]
    cfg = config(tiny_model_dir, tmp_path, mode)
    monkeypatch.setenv("PPOKIT_TEST_SIGTERM_AT", str(3 + k))  # while step 3's batch (batch 2 + k) is scored
    with pytest.raises(Preempted, match="stopped by SIGTERM after step 3"):
        train(cfg)
    monkeypatch.delenv("PPOKIT_TEST_SIGTERM_AT")
    out = tmp_path / "out"
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-2", "checkpoint-3"]
    queue = torch.load(out / "checkpoint-3" / "state_rollout_queue_0.pt", weights_only=False)
    assert (queue["produced"], queue["consumed"]) == (3 + k, 3)
    assert [int(b.policy_version.max()) for b in queue["queue"]] == [3 - k + j for j in range(k)]
    train({**cfg, "resume_from_checkpoint": "auto"})
    assert_same_run(ref, out, k)


def test_a_run_that_dies_after_a_periodic_checkpoint_resumes_from_it_exactly(
        reference, tiny_model_dir, tmp_path, monkeypatch):
    mode, ref = reference
    k = MODES[mode]["staleness_threshold"]
    cfg = config(tiny_model_dir, tmp_path, mode)
    monkeypatch.setenv("PPOKIT_TEST_DIE_AT", str(4 + k))  # in step 4: checkpoint-2 written, step 3 logged after it
    with pytest.raises(BaseException, match="the process died"):
        train(cfg)
    monkeypatch.delenv("PPOKIT_TEST_DIE_AT")
    out = tmp_path / "out"
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-2"] and max(metrics_rows(out)) == 3
    train({**cfg, "resume_from_checkpoint": "auto"})
    assert_same_run(ref, out, k)

