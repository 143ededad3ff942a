"""Checkpoints through the Session API on a tiny model: exact resume (also ZeRO-sharded and LoRA),
ignore_save_lr_and_optim, save_total_limit, the changed-argument guard and the output_dir checks."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoint_helpers import assert_bitwise_equal, metrics_rows, tiny_config

from ppokit.args import load_arguments
from ppokit.checkpoint import (
    STATE_FILE,
    CheckpointError,
    checkpoint_bytes,
    complete_checkpoints,
)
from ppokit.checkpoint.claim import EarlierRunError
from ppokit.checkpoint.run import check_output_dir
from ppokit.models.folders import hf_state_dict
from ppokit.paths import PathError
from ppokit.session import Session


def session(model_path, folder, **extra) -> Session:
    return Session(load_arguments(None, overrides=tiny_config(model_path, folder, **extra)))


def trainable(s: Session) -> dict[str, torch.Tensor]:
    """Every weight of the actor's module (LoRA adapters included), gathered under ZeRO-3."""
    from ppokit.models.weights import gathered

    with gathered(s.model):
        out = {k: v.detach().clone() for k, v in s.model.state_dict().items()}
    if s.state.critic is not None:
        critic = s.state.critic.engine.module
        with gathered(critic):
            out.update({f"critic.{k}": v.detach().clone() for k, v in critic.state_dict().items()})
    return out


PPO = {"rl_algorithm": "ppo", "kl_coeff": 0.05, "kl_loss_coeff": 0.0}


@pytest.mark.parametrize("extra", [{}, {"sharding": "stage2"}, {"sharding": "stage3"}, {"lora_rank": 4}, PPO],
                         ids=["zero0", "zero2", "zero3", "lora", "ppo"])
def test_session_resume_continues_exactly(tiny_model_dir, tmp_path, extra):
    s = session(tiny_model_dir, tmp_path, max_steps=4, **extra)
    s.step()
    s.step()
    s.save()
    third = s.step()
    expected = trainable(s)
    s.close()
    r = Session.resume(str(tmp_path / "out"))
    assert r.global_step == 2 and [h["step"] for h in r.history] == [1, 2]
    again = r.step()
    assert_bitwise_equal(expected, trainable(r))
    volatile = ("timing/", "throughput/", "memory/")  # wall time and process memory differ run to run
    assert {k: v for k, v in third.items() if not k.startswith(volatile)} == {
        k: v for k, v in again.items() if not k.startswith(volatile)}
    r.close()
    assert sorted(metrics_rows(tmp_path / "out")) == [1, 2, 3]  # step 3 logged once, by the resumed run


def test_train_after_session_resume_does_not_resume_again(tiny_model_dir, tmp_path):
    uninterrupted = session(tiny_model_dir, tmp_path / "a", max_steps=4)
    uninterrupted.train()
    s = session(tiny_model_dir, tmp_path / "b", max_steps=4, resume_from_checkpoint="auto")
    s.step()
    s.step()
    s.save()
    s.step()  # progress after the checkpoint that a resume throws away
    s.close()
    r = Session.resume(str(tmp_path / "b" / "out"))
    r.train()  # its arguments say resume_from_checkpoint=auto: the resumed session continues from step 2
    assert r.global_step == 4
    assert_bitwise_equal(hf_state_dict(uninterrupted.model), hf_state_dict(r.model))
    assert metrics_rows(tmp_path / "a" / "out") == metrics_rows(tmp_path / "b" / "out")


@pytest.mark.parametrize("extra", [{}, {"sharding": "stage2"}, {"lora_rank": 4}, PPO],
                         ids=["zero0", "zero2", "lora", "ppo"])
def test_ignore_save_lr_and_optim_saves_weights_only_and_resumes_them(tiny_model_dir, tmp_path, extra):
    s = session(tiny_model_dir, tmp_path, ignore_save_lr_and_optim=True, **extra)
    s.step()
    s.step()
    path = s.save()
    saved = trainable(s)
    lr = s.state.policy.engine.get_lr()[0]
    s.close()
    files = [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()]
    assert not (path / "actor_ds").exists()
    run_state = ("rng_state", "state_rollout_queue")  # the RNGs and the (empty) rollout queue: no optimizer state
    assert not [f for f in files if "optim" in f or f.endswith(".pt") and not f.startswith(run_state)], files
    assert (path / "actor_adapter").is_dir() == ("lora_rank" in extra)
    r = Session.resume(str(tmp_path / "out"))
    assert r.state.policy.engine.get_lr()[0] == lr  # the LR schedule continues (only Adam's moments restart)
    assert r.state.policy.engine.global_steps == 4
    r.close()
    # learning_rate 0: a step must keep the loaded weights (ZeRO's fp32 master copy was refreshed from them).
    r = Session.resume(str(tmp_path / "out"), learning_rate=0.0)
    assert_bitwise_equal(saved, trainable(r))
    r.step()
    assert_bitwise_equal(saved, trainable(r))
    r.close()


def test_save_total_limit_keeps_the_newest(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=5, save_steps=1, save_total_limit=2)
    s.train()
    out = tmp_path / "out"
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-4", "checkpoint-5"]
    assert not list(out.glob(".tmp-*")) and not list(out.glob(".old-*"))
    assert (out / "model.safetensors").is_file()  # the final model beside them
    state = json.loads((out / "checkpoint-5" / STATE_FILE).read_text())
    assert state["global_step"] == 5 and state["parts"]["producer"]["loader"]["batches_drawn"] == 5
    assert state["args"]["save_total_limit"] == 2


def test_changed_meaning_arguments_stop_the_resume_unless_forced(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=2)
    s.train()
    out = str(tmp_path / "out")
    with pytest.raises(CheckpointError) as err:
        Session.resume(out, max_dec_len=6, seed=4, max_steps=4)
    message = str(err.value)
    assert "max_dec_len: 8 -> 6" in message and "seed: 3 -> 4" in message and "--force_resume" in message
    assert "max_steps" not in message
    forced = Session.resume(out, max_dec_len=6, force_resume=True)
    assert forced.global_step == 2 and forced.args.max_dec_len == 6
    forced.close()
    harmless = Session.resume(out, max_steps=4, logging_steps=2, eval_steps=5, save_steps=3)
    assert harmless.global_step == 2
    harmless.train()
    assert harmless.global_step == 4


def test_resume_auto_without_a_checkpoint_starts_fresh_but_true_needs_one(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path / "a", max_steps=1, resume_from_checkpoint="auto")
    s.train()
    assert s.global_step == 1
    t = session(tiny_model_dir, tmp_path / "b", max_steps=1, resume_from_checkpoint=True)
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        t.train()
    assert t.global_step == 0


def test_unwritable_output_dir_stops_before_the_models_load(tiny_model_dir, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(PathError, match=f"output_dir: {blocker / 'out'} cannot be created: {blocker} is a file, not"):
        session(tiny_model_dir, tmp_path, output_dir=str(blocker / "out"))  # ppokit.paths, before build_state loads
    with pytest.raises(CheckpointError, match="is not writable"):  # train()'s own check stays (output_dir may change)
        check_output_dir(blocker / "out", 0)


def test_too_little_disk_is_found_before_training(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path)
    params = sum(p.numel() * p.element_size() for p in s.model.parameters())
    assert checkpoint_bytes(s) >= 3 * params  # weights twice (HF + DeepSpeed) and two Adam moments
    with pytest.raises(CheckpointError, match="GiB free but a checkpoint needs about"):
        check_output_dir(tmp_path / "out", 1 << 60)
    check_output_dir(tmp_path / "out", checkpoint_bytes(s))
    assert not list((tmp_path / "out").iterdir())  # the write probe is removed


def test_save_strategy_epoch_saves_when_the_prompts_start_a_new_epoch(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=5, save_strategy="epoch")  # 16 prompts, 4 per step
    s.train()
    assert [p.name for p in complete_checkpoints(tmp_path / "out")] == ["checkpoint-4", "checkpoint-5"]


def test_a_fresh_start_over_an_earlier_runs_checkpoints_needs_overwrite_output_dir(tiny_model_dir, tmp_path):
    session(tiny_model_dir, tmp_path, max_steps=2).train()
    again = session(tiny_model_dir, tmp_path, max_steps=1)
    with pytest.raises(EarlierRunError, match=r"checkpoint-2.*--resume_from_checkpoint auto.*--overwrite_output_dir"):
        again.train()
    assert again.global_step == 0
    over = session(tiny_model_dir, tmp_path, max_steps=1, overwrite_output_dir=True)
    over.train()
    assert [p.name for p in complete_checkpoints(tmp_path / "out")] == ["checkpoint-1"]
    assert sorted(metrics_rows(tmp_path / "out")) == [1]
