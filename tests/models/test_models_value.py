import pytest
import torch

from ppokit.models import (
    ValueModel,
    load_causal_lm,
    load_value_model,
    load_value_state,
    save_value_model,
)
from ppokit.testing import tiny_model_config, tiny_tokenizer


def _batch():
    torch.manual_seed(1)
    ids = torch.randint(10, 200, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    return ids, mask


def test_values_have_one_number_per_position(tiny_model_dir):
    model = load_value_model(tiny_model_dir)
    assert isinstance(model, ValueModel)
    ids, mask = _batch()
    values = model(ids, mask)
    assert values.shape == (3, 9) and values.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(ids, mask).dtype == torch.float32  # the head stays in float32


def test_a_step_trains_head_and_backbone(tiny_model_dir):
    model = load_value_model(tiny_model_dir, gradient_checkpointing=True)
    model.train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids, mask = _batch()
    loss = ((model(ids, mask) - 1.0) ** 2 * mask).sum() / mask.sum()
    loss.backward()
    opt.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert {"value_head.weight", "value_head.bias"} <= changed
    assert any(n.startswith("backbone.layers.") for n in changed)


def test_save_and_reload_give_the_same_values(tiny_model_dir, tmp_path):
    model = load_value_model(tiny_model_dir)
    with torch.no_grad():
        model.value_head.bias.fill_(0.25)
    save_value_model(model, tmp_path / "critic")
    ids, mask = _batch()
    expected = model(ids, mask)
    again = load_value_model(str(tmp_path / "critic"))
    torch.testing.assert_close(again(ids, mask), expected)
    fresh = load_value_model(tiny_model_dir)
    load_value_state(fresh, tmp_path / "critic")
    torch.testing.assert_close(fresh(ids, mask), expected)
    with pytest.raises(FileNotFoundError, match="save_value_model"):
        load_value_state(fresh, tmp_path)


def test_critic_starts_from_a_reward_models_score_head(tmp_path):
    from transformers import AutoModelForSequenceClassification

    tok = tiny_tokenizer()
    config = tiny_model_config(tok)
    config.num_labels = 1
    torch.manual_seed(3)
    rm = AutoModelForSequenceClassification.from_config(config)
    rm.save_pretrained(tmp_path / "rm")
    critic = load_value_model(str(tmp_path / "rm"))
    torch.testing.assert_close(critic.value_head.weight, rm.score.weight)


def test_critic_from_an_in_memory_actor_is_an_independent_copy(tiny_model_dir):
    actor = load_causal_lm(tiny_model_dir)
    critic = load_value_model(None, backbone=actor)
    actor_embed = actor.get_input_embeddings().weight
    critic_embed = critic.backbone.get_input_embeddings().weight
    torch.testing.assert_close(critic_embed, actor_embed)
    assert critic_embed.data_ptr() != actor_embed.data_ptr()
    assert all(p.requires_grad for p in critic.parameters())
    with pytest.raises(ValueError, match="needs a model folder"):
        load_value_model(None)
