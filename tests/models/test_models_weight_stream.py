"""`hf_state_by_module`: the actor's HF-named weights one module at a time (what vLLM's weight sync sends)."""

import copy

import pytest
import torch

from ppokit.models.weights import gathered, hf_state, hf_state_by_module
from ppokit.testing import tiny_causal_lm, tiny_tokenizer

TOK = tiny_tokenizer()


def _stream(model):
    """{name: clone} from the stream, checking each chunk is readable (full shape) while it is current."""
    out = {}
    for chunk in hf_state_by_module(model):
        assert chunk, "empty chunks are skipped"
        for name, tensor in chunk:
            assert tensor.numel() > 0, f"{name} was not gathered"
            assert name not in out or torch.equal(out[name], tensor), f"{name} sent twice with different values"
            out[name] = tensor.detach().clone()
    return out


def _reference(model):
    with gathered(model):
        return {n: t.detach().clone() for n, t in hf_state(model)}


def test_plain_model_streams_its_state_dict():
    model = tiny_causal_lm(TOK, seed=0)
    streamed = _stream(model)
    expected = model.state_dict()
    assert set(streamed) == set(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(streamed[name], tensor, msg=name)


def test_lora_model_streams_merged_base_weights_without_adapters():
    from ppokit.models import LoraSpec, apply_lora

    model = apply_lora(tiny_causal_lm(TOK, seed=0), LoraSpec(rank=4, alpha=8))
    with torch.no_grad():  # peft starts B at 0 (delta 0); make the merge visible
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    streamed = _stream(model)
    expected = _reference(model)
    assert set(streamed) == set(expected)
    assert not any("lora_" in n or "base_layer" in n for n in streamed)
    plain = tiny_causal_lm(TOK, seed=0).state_dict()
    moved = [n for n in streamed if not torch.equal(streamed[n], plain[n])]
    assert moved and all(n.endswith("proj.weight") for n in moved)  # the LoRA targets, merged
    for name, tensor in expected.items():
        torch.testing.assert_close(streamed[name], tensor, msg=name)


@pytest.mark.parametrize("stage", [3])
def test_zero3_actor_is_gathered_one_module_at_a_time(stage):
    from ppokit.engine import build_engine, deepspeed_config, init_distributed

    init_distributed()
    model = tiny_causal_lm(TOK, seed=0)
    expected = copy.deepcopy(model).state_dict()
    config = deepspeed_config(zero_stage=stage, offload_optimizer=False, micro_batch_size=1, grad_accum=1,
                              world_size=1, lr=0.1, eps=1e-8, max_grad_norm=0.0, device="cpu")
    engine = build_engine(model, config)
    module = engine.module
    assert all(p.numel() == 0 for p in module.parameters())  # partitioned: nothing readable outside a gather
    streamed = _stream(module)
    assert all(p.numel() == 0 for p in module.parameters())  # and released again after each module
    for name, tensor in expected.items():
        torch.testing.assert_close(streamed[name], tensor, msg=name)
