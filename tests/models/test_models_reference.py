import pytest
import torch

from ppokit.models import LoraSpec, hf_state, load_causal_lm, load_reference, plain_copy


def _inputs():
    torch.manual_seed(0)
    ids = torch.randint(10, 200, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    return dict(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)


def _train_adapters(actor, steps=3):
    opt = torch.optim.SGD([p for p in actor.parameters() if p.requires_grad], lr=0.5)
    actor.train()
    for _ in range(steps):
        ids = torch.randint(10, 200, (2, 10))
        actor(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()


def test_lora_reference_is_the_base_model_and_leaves_the_actor_alone(tiny_model_dir):
    base = load_causal_lm(tiny_model_dir).eval()
    actor = load_causal_lm(tiny_model_dir, lora=LoraSpec(rank=4, alpha=8))
    reference = load_reference(actor, tiny_model_dir, lora_used=True)
    inputs = _inputs()
    with torch.no_grad():
        expected = base(**inputs).logits
    _train_adapters(actor)
    actor.train()
    ref_logits = reference(**inputs).logits
    assert actor.training  # the actor's mode is restored after a reference call
    assert not ref_logits.requires_grad
    torch.testing.assert_close(ref_logits, expected, atol=1e-5, rtol=1e-5)
    actor.eval()
    with torch.no_grad():
        actor_logits = actor(**inputs).logits
    assert (actor_logits - expected).abs().max() > 1e-3  # adapters are active again for the actor


def test_plain_reference_is_a_frozen_copy(tiny_model_dir):
    actor = load_causal_lm(tiny_model_dir)
    reference = load_reference(actor, tiny_model_dir)
    assert reference is not actor and not reference.training
    assert not any(p.requires_grad for p in reference.parameters())
    inputs = _inputs()
    actor.eval()
    with torch.no_grad():
        torch.testing.assert_close(reference(**inputs).logits, actor(**inputs).logits)


def test_reference_without_a_folder_copies_the_actor(tiny_model_dir):
    actor = load_causal_lm(tiny_model_dir).eval()
    reference = load_reference(actor, None)
    inputs = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(reference(**inputs).logits, actor(**inputs).logits)
    assert not any(p.requires_grad for p in reference.parameters())


def test_merged_lora_state_equals_peft_merge(tiny_model_dir):
    actor = load_causal_lm(tiny_model_dir, lora=LoraSpec(rank=4, alpha=8))
    _train_adapters(actor, steps=1)
    ours = dict(hf_state(actor))
    assert not any("lora_" in name or "base_layer" in name for name in ours)
    copy = plain_copy(actor, torch.float32)
    merged = actor.merge_and_unload().state_dict()
    assert set(ours) == set(merged)
    for name, tensor in merged.items():
        torch.testing.assert_close(ours[name], tensor)
        torch.testing.assert_close(copy.state_dict()[name], tensor)


@pytest.mark.parametrize("from_folder", [True, False], ids=["folder", "in-memory"])
def test_reference_uses_the_actors_attention_implementation(tiny_model_dir, from_folder):
    """The reference computes as the actor does, attention kernel included (issue #30, fault 5): an actor loaded with
    eager attention gets an eager reference, not the SDPA default."""
    actor = load_causal_lm(tiny_model_dir, attn_implementation="eager").eval()
    reference = load_reference(actor, tiny_model_dir if from_folder else None)
    assert reference.config._attn_implementation == "eager"
    assert load_reference(actor, None, attn_implementation="sdpa").config._attn_implementation == "sdpa"
    inputs = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(reference(**inputs).logits, actor(**inputs).logits)
