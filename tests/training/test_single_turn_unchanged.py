"""Single-turn runs compute exactly what they computed before `loss_mask` existed (issue 27), checked on this machine.

Before the loss mask, every loss, KL, entropy, advantage and denominator read `response_mask`. The reference run
builds its batches without any loss mask (`build_batch(..., loss_masks=None)`, whose loss mask is the response
mask), which is that computation; the normal run builds them as the rollout reports. Every metric of 2 steps of a
tiny GRPO, PPO (KL in the reward, GAE) and REINFORCE++ (KL loss, entropy, overlong buffer) session must be equal to
the last bit, and the single-turn loss mask must equal the response mask. Both runs are made in this process, so
the comparison holds on every CPU (floats recorded on another machine do not: kernels differ between CPU kinds).
"""

import json
import sys
from pathlib import Path

import pytest
import torch

import ppokit.training.batch as batch_mod
from ppokit.args import load_arguments
from ppokit.session import Session
from ppokit.testing import letter_a, save_tiny_model

RUNS = {
    "grpo": dict(rl_algorithm="grpo", rollout_n=4, kl_loss_coeff=0.01, entropy_coeff=0.01),
    "ppo": dict(rl_algorithm="ppo", rollout_n=1, kl_coeff=0.05, kl_loss_coeff=0.0),
    "reinforce_plus_plus": dict(rl_algorithm="reinforce_plus_plus", rollout_n=2, kl_loss_coeff=0.0,
                                enable_overlong_reward_buffer=True, overlong_reward_buffer=4,
                                overlong_penalty_factor=0.5),
}


def run_metrics(name: str, root: Path) -> tuple[list[dict], list]:
    model = save_tiny_model(root / "model", seed=0)
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(16)))
    overrides = dict(actor_model_name_or_path=model, train_datasets=str(data), global_batch_size=4,
                     global_mini_batch_size=4, per_device_train_batch_size=2, max_dec_len=8, max_prompt_len=32,
                     max_length=64, learning_rate=1e-3, max_steps=2, output_dir=str(root / "out"),
                     logging_dir=str(root / "vdl"), report_to=["none"], seed=1, disable_tqdm=True,
                     save_strategy="no", logging_steps=1, **RUNS[name])
    session = Session(load_arguments(None, overrides=overrides), reward_functions=[letter_a])
    history = [session.step() for _ in range(2)]
    skip = ("timing/", "memory/", "throughput/")
    return [{k: v for k, v in h.items() if isinstance(v, (int, float)) and not k.startswith(skip)}
            for h in history]


def _patch_build_batch(monkeypatch, without_loss_mask: bool, built: list) -> None:
    """Record every batch built; with `without_loss_mask`, build it as before the loss mask existed."""
    original = batch_mod.build_batch

    def build(*args, **kwargs):
        if without_loss_mask:
            kwargs["loss_masks"] = None
        out = original(*args, **kwargs)
        built.append(out)
        return out

    for module in list(sys.modules.values()):  # wherever the trainer imported it by name
        if getattr(module, "__name__", "").startswith("ppokit") and getattr(module, "build_batch", None) is original:
            monkeypatch.setattr(module, "build_batch", build)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_single_turn_metrics_are_bit_identical_to_the_response_mask_computation(name, tmp_path, monkeypatch):
    built: list = []
    with monkeypatch.context() as patch:
        _patch_build_batch(patch, without_loss_mask=False, built=built)
        got = run_metrics(name, tmp_path / "run")
    assert built and all(torch.equal(b.loss_mask, b.response_mask) for b in built)
    with monkeypatch.context() as patch:
        _patch_build_batch(patch, without_loss_mask=True, built=[])
        reference = run_metrics(name, tmp_path / "reference")
    assert len(got) == len(reference) == 2
    for step, (g, e) in enumerate(zip(got, reference)):
        assert sorted(g) == sorted(e), (step, set(g) ^ set(e))
        diff = {k: (g[k], e[k]) for k in e if g[k] != e[k]}
        assert not diff, f"step {step}: {diff}"
    assert any(h["actor/grad_norm"] > 0 for h in got)  # the runs trained: equal numbers are not idle numbers
