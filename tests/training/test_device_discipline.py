"""Every tensor the trainer feeds a model is on that model's device (issue #30, fault 1).

No GPU here: `device_tags.OnDevice` puts the model on a pretend "cuda:0" and refuses any op that mixes its tensors
with CPU ones, as CUDA does. The batch is built on the CPU, as the rollout phase builds it; the trainer's entry points
(old/reference log-probs, values, the actor's and the critic's update, PTX) must move what they feed the model.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from device_tags import PRETEND, DeviceMismatch, OnDevice, host_tensors, tagged

from ppokit.models.value import ValueModel
from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training.actor import actor_update
from ppokit.training.batch import build_batch
from ppokit.training.critic import Critic, critic_update
from ppokit.training.device import to_model_device
from ppokit.training.forward import batched_logprobs, policy_forward
from ppokit.training.packing import can_pack
from ppokit.training.ptx import ptx_nll
from ppokit.training.update import LossConfig


class Engine:
    """What ppokit uses of a DeepSpeed engine: it calls the module on its inputs as they are (DeepSpeed does not move
    inputs either), back-propagates, and steps plain SGD."""

    def __init__(self, module, lr=1e-2):
        self.module, self.lr, self.dp_world_size, self.device = module, lr, 1, PRETEND

    def __call__(self, **inputs):
        return self.module(**inputs)

    def set_gradient_accumulation_boundary(self, last):
        self.last = last

    def backward(self, loss, scale_wrt_gas=False):
        loss.backward()

    @torch.no_grad()
    def step(self):
        if self.last:
            for p in self.module.parameters():
                if p.grad is not None:
                    p -= self.lr * p.grad
                    p.grad = None

    def zero_optimization_stage(self):
        return 0

    def fp16_enabled(self):
        return False

    def get_lr(self):
        return [self.lr]


@pytest.fixture()
def tok():
    return tiny_tokenizer()


def rollout_batch(tok, shared_prompts: bool):
    """A CPU batch as the rollout phase builds it (2 prompts x 2 responses, or 4 distinct prompts), with the fields
    the later phases add (CPU tensors too)."""
    prompts = [tok.encode("say a:"), tok.encode("count to three, then")]
    if not shared_prompts:
        prompts += [tok.encode("b?"), tok.encode("hello there")]
    index = [0, 0, 1, 1] if shared_prompts else [0, 1, 2, 3]
    responses = [tok.encode(t) for t in ("aa a", "b", "one two", "x y z w")]
    records = [{"prompt": str(i)} for i in range(len(prompts))]
    batch = build_batch(records, prompts, [r["prompt"] for r in records], index, responses, ["stop"] * 4, tok,
                        rollout_logprobs=[[-1.0] * len(r) for r in responses])
    g = torch.Generator().manual_seed(0)
    shape = batch.response_mask.shape
    fields = {k: -torch.rand(shape, generator=g) * batch.response_mask for k in ("old_logprobs", "ref_logprobs")}
    fields.update(advantages=torch.randn(shape, generator=g) * batch.response_mask,
                  values=torch.randn(shape, generator=g) * batch.response_mask,
                  returns=torch.randn(shape, generator=g) * batch.response_mask,
                  scores=torch.tensor([1.0, 0.0, 1.0, 0.0]))
    for k, v in fields.items():
        setattr(batch, k, v)
    return batch


def loss_config(**kw):
    base = dict(policy_loss="vanilla", clip_low=0.2, clip_high=0.2, clip_ratio_c=None, agg_mode="token-mean",
                norm_constant=16.0, pg_coeff=1.0, kl_coeff=0.1, kl_estimator="k3", entropy_coeff=0.01,
                clip_range_value=0.5, chunk_size=64, rollout_is="token", positive_lm_coeff=0.1)
    base.update(kw)
    return LossConfig(**base)


PLAN = SimpleNamespace(update_iters=1, mini_batch_sequences_per_rank=4, micro_batch_size=2)


@pytest.mark.parametrize("shared", [True, False], ids=["packed", "whole-rows"])
def test_actor_update_feeds_the_model_on_its_device(tok, shared):
    model = tiny_causal_lm(tok)
    batch = rollout_batch(tok, shared)
    assert can_pack(model, batch) == shared  # both forward paths are covered
    before = [p.detach().clone() for p in model.parameters()]
    with OnDevice(model):
        metrics = actor_update(SimpleNamespace(engine=Engine(model), compute_dtype=torch.float32, device=PRETEND),
                               batch, loss_config(), PLAN)
    assert all(v == v for v in metrics.values())  # finite
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))  # the step happened
    assert host_tensors(batch) == host_tensors(rollout_batch(tok, shared))  # the caller's batch is left on the CPU


@pytest.mark.parametrize("shared", [True, False], ids=["packed", "whole-rows"])
def test_old_and_reference_logprobs_on_the_models_device(tok, shared):
    actor, reference = tiny_causal_lm(tok, seed=1), tiny_causal_lm(tok, seed=2).eval().requires_grad_(False)
    batch = rollout_batch(tok, shared)
    with OnDevice(actor, reference):
        old = batched_logprobs(actor, batch, 2, 64, torch.float32, PRETEND)
        ref = batched_logprobs(reference, batch, 3, 64, torch.float32, PRETEND)
    # the results join the batch, which lives on the CPU (advantages and rewards are computed there)
    assert not tagged(old) and not tagged(ref)
    plain = batched_logprobs(actor, batch, 4, 64, torch.float32, "cpu")
    torch.testing.assert_close(old, plain)
    assert (old[batch.response_mask.bool()] < 0).all() and (old[~batch.response_mask.bool()] == 0).all()


def test_critic_values_and_update_on_the_models_device(tok):
    backbone = tiny_causal_lm(tok).model
    value_model = ValueModel(backbone, torch.nn.Linear(backbone.config.hidden_size, 1))
    critic = Critic(engine=Engine(value_model), compute_dtype=torch.float32, device=PRETEND, batch_size=2)
    batch = rollout_batch(tok, True)
    head = value_model.value_head.weight.detach().clone()
    with OnDevice(value_model):
        values = critic.values(batch)
        metrics = critic_update(critic, batch, loss_config(), PLAN)
    assert not tagged(values) and values.shape == batch.response_mask.shape
    assert metrics["critic/value_loss"] > 0
    assert not torch.equal(head, value_model.value_head.weight.detach())


def test_ptx_loss_on_the_models_device(tok):
    model = tiny_causal_lm(tok)
    records = [{"_prompt_ids": tok.encode("q: 1+1"), "label": "2"}, {"_prompt_ids": tok.encode("q"), "label": "ab"}]
    with OnDevice(model):
        nll = ptx_nll(model, records, tok, 64, torch.float32, PRETEND)
        nll.backward()
    assert tagged(nll) and float(nll.detach()) > 0
    assert model.model.embed_tokens.weight.grad.abs().sum() > 0


def test_the_pretend_device_refuses_what_cuda_refuses(tok):
    """The check is real: the same forward with the batch left on the CPU is refused."""
    model = tiny_causal_lm(tok)
    batch = rollout_batch(tok, True)
    with OnDevice(model), pytest.raises(DeviceMismatch, match="same device"):
        policy_forward(model, batch, 64, "none", torch.float32, PRETEND)
    with OnDevice(model):
        logp, _ = policy_forward(model, to_model_device(batch, PRETEND), 64, "none", torch.float32, PRETEND)
        moved = to_model_device((batch.response_mask, {"m": batch.response_mask}), PRETEND)
        with pytest.raises(DeviceMismatch):
            logp * batch.response_mask
    assert tagged(logp) and tagged(moved[0]) and tagged(moved[1]["m"])


def test_to_model_device_moves_every_tensor_of_a_batch(tok):
    batch = rollout_batch(tok, True)
    batch.reward_terms = {"r": torch.ones(4)}
    model = tiny_causal_lm(tok)
    with OnDevice(model):
        moved = to_model_device(batch, PRETEND)
    assert host_tensors(moved) == [] and len(host_tensors(batch)) > 5
    assert moved.records is batch.records and moved.prompt_len == batch.prompt_len
