"""DeepSpeed on CPU, single process: ZeRO 0/2/3 steps, the accumulation contract, LR schedule."""

import copy
import os

import pytest
import torch

from ppokit.engine import (
    build_engine,
    current_lr,
    deepspeed_config,
    init_distributed,
    micro_batch_backward,
)
from ppokit.models.weights import gathered
from ppokit.testing import tiny_causal_lm, tiny_tokenizer


@pytest.fixture(scope="module")
def dist():
    return init_distributed()


@pytest.fixture(scope="module")
def tiny():
    tok = tiny_tokenizer()
    return tok, tiny_causal_lm(tok, seed=0)


def _config(stage, micro=2, accum=2, lr=1.0, eps=1.0):
    # lr=1, eps=1: Adam's first update is g / (|g| + 1), which (unlike plain Adam) depends on the
    # gradient's scale, so a wrong loss scaling cannot hide. No clipping for the same reason.
    return deepspeed_config(zero_stage=stage, offload_optimizer=False, micro_batch_size=micro, grad_accum=accum,
                            world_size=1, lr=lr, eps=eps, max_grad_norm=0.0, device="cpu")


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 200, (4, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[3, 5:] = 0
    return ids, mask


def _token_loss(model, ids, mask, denominator):
    """Sum of token NLL over this micro-batch divided by the token count of the WHOLE mini-batch."""
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1].float()
    logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return -(logp * mask[:, 1:]).sum() / denominator


def _params(model):
    with gathered(model):
        return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_init_distributed_is_a_single_process_group_and_idempotent(dist):
    assert (dist.rank, dist.world_size, dist.local_rank, dist.device.type) == (0, 1, 0, "cpu")
    assert os.environ["WORLD_SIZE"] == "1" and os.environ["MASTER_PORT"].isdigit()
    assert init_distributed() == dist


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_two_micro_batches_equal_one_big_batch(dist, tiny, stage):
    _, model0 = tiny
    ids, mask = _batch()
    tokens = mask[:, 1:].sum()

    reference = copy.deepcopy(model0)
    opt = torch.optim.AdamW(reference.parameters(), lr=1.0, eps=1.0, weight_decay=0.0)
    _token_loss(reference, ids, mask, tokens).backward()
    opt.step()
    expected = _params(reference)

    before = _params(model0)
    engine = build_engine(copy.deepcopy(model0), _config(stage))
    engine.train()
    applied = [
        micro_batch_backward(engine, _token_loss(engine, ids[:2], mask[:2], tokens), last=False),
        micro_batch_backward(engine, _token_loss(engine, ids[2:], mask[2:], tokens), last=True),
    ]
    assert applied == [False, True] and engine.global_steps == 1
    after = _params(engine.module)
    assert max((after[n] - before[n]).abs().max().item() for n in before) > 1e-3  # a real update
    for name, value in expected.items():
        torch.testing.assert_close(after[name], value, atol=1e-5, rtol=0, msg=name)


def test_a_zero3_engine_leaves_the_processes_linear_as_it_found_it(dist, tiny):
    """DeepSpeed's zero.Init (run by deepspeed.initialize for stage 3) swaps F.linear for its own "until manually
    reset": every later model in the process would compute other bits than alone (with a bias: another rounding)."""
    native = torch.nn.functional.linear
    build_engine(copy.deepcopy(tiny[1]), _config(3))
    assert torch.nn.functional.linear is native
    layer, x = torch.nn.Linear(24, 40), torch.randn(8, 24)
    assert torch.equal(layer(x), torch._C._nn.linear(x, layer.weight, layer.bias))


def test_a_lone_rank_skips_the_allreduce_and_gets_the_same_bits(dist, tiny):
    """ZeRO 0 on one rank: no flatten/all-reduce/copy-back round trip, and the weights after two optimizer steps
    of two micro-batches each equal, bit for bit, those of the engine that does it."""
    _, model0 = tiny
    ids, mask = _batch()
    tokens = mask[:, 1:].sum()
    engines = [build_engine(copy.deepcopy(model0), _config(0)) for _ in range(2)]
    assert [e.enable_backward_allreduce for e in engines] == [False, False]
    assert build_engine(copy.deepcopy(model0), _config(2)).enable_backward_allreduce  # ZeRO 2 reduces its own way
    bf16 = deepspeed_config(zero_stage=0, offload_optimizer=False, micro_batch_size=2, grad_accum=2, world_size=1,
                            lr=1.0, device="cpu", compute_dtype=torch.bfloat16)  # the bench's: torch_autocast section
    assert not build_engine(copy.deepcopy(model0), bf16).enable_backward_allreduce
    engines[1].enable_backward_allreduce = True  # DeepSpeed's own path
    calls = []
    engines[1].allreduce_gradients = lambda *a, _own=engines[1].allreduce_gradients, **k: calls.append(1) or _own(*a, **k)
    for engine in engines:
        engine.train()
        for _ in range(2):
            micro_batch_backward(engine, _token_loss(engine, ids[:2], mask[:2], tokens), last=False)
            micro_batch_backward(engine, _token_loss(engine, ids[2:], mask[2:], tokens), last=True)
    assert len(calls) == 4  # the reference really took the all-reduce path, after every backward
    skipped, reduced = _params(engines[0].module), _params(engines[1].module)
    assert all(torch.equal(skipped[n], reduced[n]) for n in reduced)


def test_micro_batch_count_need_not_match_the_config(dist, tiny):
    """Three micro-batches under a config that says two: the explicit boundary decides."""
    _, model0 = tiny
    ids, mask = _batch()
    tokens = mask[:, 1:].sum()
    engine = build_engine(copy.deepcopy(model0), _config(0, micro=2, accum=2))
    parts = [slice(0, 1), slice(1, 3), slice(3, 4)]
    for k, part in enumerate(parts):
        micro_batch_backward(engine, _token_loss(engine, ids[part], mask[part], tokens), last=k == 2)
    reference = copy.deepcopy(model0)
    opt = torch.optim.AdamW(reference.parameters(), lr=1.0, eps=1.0, weight_decay=0.0)
    _token_loss(reference, ids, mask, tokens).backward()
    opt.step()
    after, expected = _params(engine.module), _params(reference)
    for name, value in expected.items():
        torch.testing.assert_close(after[name], value, atol=1e-5, rtol=0, msg=name)


def test_lr_schedule_steps_once_per_optimizer_step(dist, tiny):
    _, model0 = tiny
    ids, mask = _batch()
    schedule = dict(kind="linear", total_steps=4, warmup_steps=2, lr=0.1)
    engine = build_engine(copy.deepcopy(model0), _config(2, lr=0.1), schedule)
    seen = []
    for _ in range(4):
        seen.append(current_lr(engine))
        for k in range(2):
            part = slice(2 * k, 2 * k + 2)
            micro_batch_backward(engine, _token_loss(engine, ids[part], mask[part], 10.0), last=k == 1)
    assert seen == pytest.approx([0.0, 0.05, 0.1, 0.05])


def test_bad_losses_and_models_are_refused(dist, tiny):
    _, model0 = tiny
    engine = build_engine(copy.deepcopy(model0), _config(0))
    with pytest.raises(FloatingPointError, match="refusing to back-propagate"):
        micro_batch_backward(engine, torch.tensor(float("nan"), requires_grad=True), last=True)
    with pytest.raises(ValueError, match="scalar loss"):
        micro_batch_backward(engine, torch.ones(2, requires_grad=True), last=True)
    frozen = copy.deepcopy(model0).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_engine(frozen, _config(0))
    with pytest.raises(ValueError, match="differs from the DeepSpeed config"):
        build_engine(copy.deepcopy(model0), _config(0, lr=0.1), dict(kind="constant", total_steps=1,
                                                                      warmup_steps=0, lr=0.2))


@pytest.mark.parametrize("stage", [2, 3])
def test_rollouts_follow_an_engine_module(dist, tiny, stage):
    from ppokit.rollout import SamplingParams, make_rollout_engine

    tok, model0 = tiny
    ids, mask = _batch()
    engine = build_engine(copy.deepcopy(model0), _config(stage, lr=0.1, eps=1e-8))
    rollout = make_rollout_engine("hf", False, engine.module, tok, compute_dtype=torch.bfloat16)
    # ZeRO-3 generates from a gathered plain copy; otherwise from the live module under autocast.
    assert (rollout.generation_model is engine.module) == (stage != 3)
    micro_batch_backward(engine, _token_loss(engine, ids, mask, 10.0), last=True)
    rollout.update_weights(engine.module)
    trained = _params(engine.module)
    used = _params(rollout.generation_model)
    for name, value in trained.items():
        torch.testing.assert_close(used[name], value.to(used[name].dtype), msg=name)
    out = rollout.generate([ids[0].tolist()], SamplingParams(n=2, temperature=1.0, max_new_tokens=3))
    assert len(out.response_ids) == 2


def test_lora_actor_in_an_engine_keeps_its_reference(dist, tiny_model_dir):
    from ppokit.models import LoraSpec, load_causal_lm, load_reference

    ids, mask = _batch()
    base = load_causal_lm(tiny_model_dir).eval()
    actor = load_causal_lm(tiny_model_dir, lora=LoraSpec(rank=4, alpha=8))
    engine = build_engine(actor, _config(2, lr=0.1, eps=1e-8))
    reference = load_reference(engine.module, tiny_model_dir, lora_used=True)
    micro_batch_backward(engine, _token_loss(engine, ids, mask, 10.0), last=True)
    with torch.no_grad():
        expected = base(input_ids=ids, attention_mask=mask).logits
        moved = engine.module(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(reference(input_ids=ids, attention_mask=mask).logits, expected)
    assert (moved - expected).abs().max() > 1e-4


def test_critic_saved_from_a_zero3_engine_reloads(dist, tiny_model_dir, tmp_path):
    from ppokit.models import load_value_model, save_value_model

    ids, mask = _batch()
    critic = load_value_model(tiny_model_dir)
    with torch.no_grad():
        critic.value_head.bias.fill_(0.5)
        expected = critic(ids, mask)
    engine = build_engine(critic, _config(3))
    save_value_model(engine.module, tmp_path / "critic")
    reloaded = load_value_model(str(tmp_path / "critic"))
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids, mask), expected)


@pytest.mark.parametrize("stage", [0, 2])
def test_engine_checkpoints_round_trip(dist, tiny, stage, tmp_path):
    _, model0 = tiny
    ids, mask = _batch()
    schedule = dict(kind="linear", total_steps=10, warmup_steps=2)
    engine = build_engine(copy.deepcopy(model0), _config(stage, lr=0.1, eps=1e-8), schedule)
    for _ in range(2):
        micro_batch_backward(engine, _token_loss(engine, ids, mask, 10.0), last=True)
    engine.save_checkpoint(str(tmp_path), tag="step2")
    again = build_engine(copy.deepcopy(model0), _config(stage, lr=0.1, eps=1e-8), schedule)
    again.load_checkpoint(str(tmp_path), tag="step2")
    assert again.global_steps == 2 and current_lr(again) == pytest.approx(current_lr(engine))
    for a, b in zip(engine.module.parameters(), again.module.parameters()):
        torch.testing.assert_close(a, b)
    for e in (engine, again):  # and both continue identically
        micro_batch_backward(e, _token_loss(e, ids, mask, 10.0), last=True)
    for a, b in zip(engine.module.parameters(), again.module.parameters()):
        torch.testing.assert_close(a, b)
