"""The critic: value head, its own optimizer and schedule, learning a constant reward, warm-up."""

import pytest
import torch
from ppo_helpers import changed, constant_one, distinct_chars, make_ppo, rollout_with_advantages, snapshot

from ppokit.models import is_recomputing


def test_value_head_gives_one_value_per_response_token_and_is_trained(tiny_model_dir, prompts_file, tmp_path):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=distinct_chars, critic_recompute=True)
    critic = s.state.critic
    head = critic.model.value_head
    assert isinstance(head, torch.nn.Linear) and tuple(head.weight.shape) == (1, 64)  # hidden 64 -> 1
    assert is_recomputing(critic.model.backbone)  # critic_recompute
    assert not is_recomputing(s.model)  # the actor's recompute is its own key
    batch = rollout_with_advantages(s)
    assert batch.values.shape == batch.response_mask.shape
    assert torch.all(batch.values[batch.response_mask == 0] == 0)
    assert batch.values[batch.response_mask > 0].abs().sum() > 0
    before = snapshot(critic.model)
    metrics = s.update(batch)
    moved = changed(before, snapshot(critic.model))
    assert "value_head.weight" in moved and any(k.startswith("backbone.") for k in moved)
    assert metrics["critic/grad_norm"] > 0  # measured before clipping, also on ZeRO-0
    for key in ("critic/value_loss", "critic/vf_clipfrac", "critic/values_mean", "critic/explained_variance",
                "critic/lr"):
        assert key in metrics


def test_critic_learns_a_constant_reward(tiny_model_dir, prompts_file, tmp_path):
    # The actor never moves (critic warm-up longer than the run): only the critic learns V = 1.
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=constant_one, critic_learning_rate=3e-3,
                 critic_warmup_steps=100, max_steps=12)
    losses, values_means = [], []
    for _ in range(12):
        m = s.step()
        losses.append(m["critic/value_loss"])
        values_means.append(m["critic/values_mean"])
    assert losses[-1] < losses[0] / 10, losses
    assert sum(losses[-3:]) < sum(losses[:3]) / 10, losses
    assert abs(values_means[-1] - 1.0) < abs(values_means[0] - 1.0), values_means  # values move towards the return 1


def test_critic_warmup_steps_keep_the_actor_still_while_the_critic_moves(tiny_model_dir, prompts_file, tmp_path):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=distinct_chars, critic_warmup_steps=1,
                 critic_learning_rate=0.05, critic_lr_scheduler_type="constant", critic_weight_decay=0.3,
                 learning_rate=1e-3, weight_decay=0.0)
    actor, critic = snapshot(s.model), snapshot(s.state.critic.model)
    first = s.step()
    assert changed(actor, snapshot(s.model)) == []
    assert changed(critic, snapshot(s.state.critic.model)) != []
    assert "actor/pg_loss" not in first
    # the critic's own optimizer and schedule
    assert first["critic/lr"] == pytest.approx(0.05)
    assert s.state.critic.engine.optimizer.param_groups[0]["weight_decay"] == pytest.approx(0.3)
    second = s.step()
    assert changed(actor, snapshot(s.model)) != []
    assert second["actor/lr"] == pytest.approx(1e-3) and second["critic/lr"] == pytest.approx(0.05)


def test_critic_starts_from_the_reward_model(tiny_model_dir, prompts_file, tmp_path, letter_rm_dir):
    from transformers import AutoModelForSequenceClassification

    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=None, reward_model_name_or_path=letter_rm_dir)
    critic = s.state.critic
    assert critic.source == letter_rm_dir
    rm = AutoModelForSequenceClassification.from_pretrained(letter_rm_dir, num_labels=1)
    torch.testing.assert_close(critic.model.value_head.weight, rm.score.weight)
    torch.testing.assert_close(critic.model.backbone.embed_tokens.weight, rm.model.embed_tokens.weight)


def test_critic_model_name_or_path_wins_and_must_share_the_vocabulary(tiny_model_dir, prompts_file, tmp_path,
                                                                      letter_rm_dir):
    from ppokit.testing import save_tiny_model

    other = save_tiny_model(tmp_path / "critic", seed=5)
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path / "a", reward=constant_one, critic_model_name_or_path=other,
                 reward_model_name_or_path=letter_rm_dir)
    assert s.state.critic.source == other

    foreign = tmp_path / "foreign"
    save_tiny_model(foreign, seed=6)
    text = (foreign / "tokenizer.json").read_text()
    renamed = text.replace('"a":', '"a_":', 1)  # the actor's token "a" is missing from the critic's vocabulary
    assert renamed != text
    (foreign / "tokenizer.json").write_text(renamed)
    with pytest.raises(ValueError, match="tokenizer differs from the actor's"):
        make_ppo(tiny_model_dir, prompts_file, tmp_path / "b", reward=constant_one,
                 critic_model_name_or_path=str(foreign))
