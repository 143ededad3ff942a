"""Resume hardening (issue 15 #1, #2, #8): a changed optimizer key takes effect, resuming an older checkpoint
moves the newer ones aside, and a damaged checkpoint is a sentence naming the file ('auto' skips it)."""

from __future__ import annotations

import logging
import math

import pytest
from checkpoint_helpers import max_abs_diff
from test_checkpoint_session import PPO, session, trainable

from ppokit.checkpoint import complete_checkpoints, find_checkpoint
from ppokit.checkpoint.guard import DamagedCheckpointError
from ppokit.engine.schedule import make_lr_lambda
from ppokit.errors import PpokitError
from ppokit.export import resolve_source
from ppokit.session import Session


@pytest.fixture(scope="module")
def two_checkpoints(tiny_model_dir, tmp_path_factory):
    """A 4-step GRPO run (2 optimizer steps per rollout step) with checkpoint-2 and checkpoint-4."""
    folder = tmp_path_factory.mktemp("run")
    s = session(tiny_model_dir, folder, max_steps=4, save_steps=2)
    s.train()
    s.close()
    return folder / "out"


def copy_run(out, tmp_path):
    import shutil

    target = tmp_path / "out"
    shutil.copytree(out, target)
    return target


def cosine_lr(lr: float, step: int, total: int = 8) -> float:
    """The runs' schedule: warmup_ratio 0.2, rounded up as PaddleNLP does."""
    return lr * make_lr_lambda("cosine", total, math.ceil(0.2 * total), lr)(step)


def test_changed_learning_rate_on_resume_takes_effect(two_checkpoints, tmp_path):
    out = copy_run(two_checkpoints, tmp_path)
    same = Session.resume(str(out / "checkpoint-2"))
    assert same.state.policy.engine.get_lr()[0] == pytest.approx(cosine_lr(3e-3, 4), rel=1e-12)
    same_metrics = same.step()
    same_weights = trainable(same)
    same.close()
    faster = Session.resume(str(out / "checkpoint-2"), learning_rate=3e-2, weight_decay=0.1, adam_beta2=0.99)
    engine = faster.state.policy.engine
    assert engine.get_lr()[0] == pytest.approx(cosine_lr(3e-2, 4), rel=1e-12)  # the schedule continues at step 4
    group = engine.optimizer.param_groups[0]
    assert group["weight_decay"] == 0.1 and tuple(group["betas"]) == (0.9, 0.99)
    metrics = faster.step()
    # actor/lr is the rate the step's first optimizer step used (schedule step 4), not the one after it
    assert metrics["actor/lr"] == pytest.approx(cosine_lr(3e-2, 4), rel=1e-12)
    assert same_metrics["actor/lr"] == pytest.approx(cosine_lr(3e-3, 4), rel=1e-12)
    assert max_abs_diff(same_weights, trainable(faster)) > 1e-4
    faster.close()


def test_changed_critic_learning_rate_on_resume_takes_effect(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=2, **PPO)
    s.step()
    s.save()
    s.close()
    r = Session.resume(str(tmp_path / "out"), critic_learning_rate=1e-2)
    assert r.state.critic.engine.get_lr()[0] == pytest.approx(cosine_lr(1e-2, 2, total=4), rel=1e-12)
    assert r.state.policy.engine.get_lr()[0] == pytest.approx(cosine_lr(3e-3, 2, total=4), rel=1e-12)
    r.close()


def test_resuming_an_older_checkpoint_moves_the_newer_ones_aside(two_checkpoints, tmp_path):
    out = copy_run(two_checkpoints, tmp_path)
    r = Session.resume(str(out / "checkpoint-2"))
    r.close()
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-2"]
    assert (out / "abandoned" / "checkpoint-4" / "trainer_state.json").is_file()
    note = (out / "abandoned" / "NOTE.txt").read_text()
    assert "checkpoint-4 moved here" in note and "resumed from checkpoint-2" in note
    assert find_checkpoint("auto", out) == out / "checkpoint-2"
    assert resolve_source(out) == out / "checkpoint-2" / "actor"
    assert Session.resume(str(out)).global_step == 2


def test_empty_trainer_state_is_a_sentence_and_auto_skips_it(two_checkpoints, tmp_path, caplog):
    out = copy_run(two_checkpoints, tmp_path)
    (out / "checkpoint-4" / "trainer_state.json").write_text("")
    with pytest.raises(DamagedCheckpointError, match=r"checkpoint-4/trainer_state.json cannot be read as JSON") as info:
        Session.resume(str(out / "checkpoint-4"))
    assert isinstance(info.value, PpokitError)
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        assert find_checkpoint("auto", out) == out / "checkpoint-2"
        r = Session.resume(str(out))
    assert r.global_step == 2 and "checkpoint-4" in caplog.text
    r.close()


def test_garbage_deepspeed_state_is_a_sentence_and_auto_skips_it(two_checkpoints, tmp_path, caplog):
    out = copy_run(two_checkpoints, tmp_path)
    states = out / "checkpoint-4" / "actor_ds" / "state" / "mp_rank_00_model_states.pt"
    states.write_bytes(states.read_bytes()[:100])  # truncated
    with pytest.raises(DamagedCheckpointError, match=r"actor_ds/state/mp_rank_00_model_states.pt is missing or not a complete torch file"):
        Session.resume(str(out / "checkpoint-4"))
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        r = Session.resume(str(out))
    assert r.global_step == 2 and "mp_rank_00_model_states.pt" in caplog.text
    before = trainable(r)
    r.step()
    assert max_abs_diff(before, trainable(r)) > 0
    r.close()
