"""PaddleNLP's llama ppo_argument.json (reconstructed, tests/fixtures/paddle) parses and runs a PPO step."""

from pathlib import Path

import pytest

from ppokit.session import Session

FIXTURES = Path(__file__).parents[1] / "fixtures" / "paddle"
LLAMA_PPO = FIXTURES / "llama_ppo_argument_843739d2f.json"

REQUIRED_METRICS = ("critic/value_loss", "critic/vf_clipfrac", "critic/values_mean", "critic/explained_variance",
                    "critic/grad_norm", "critic/lr", "kl/beta", "actor/ptx_loss")


def test_llama_ppo_argument_json_parses_with_its_ppo_keys():
    from ppokit.args import load_arguments

    a = load_arguments(str(LLAMA_PPO))
    assert a.rl_algorithm == "ppo"  # PaddleNLP's default
    assert (a.ptx_datasets, a.ptx_coeff) == ("alpaca", 16.0)
    assert a.reward_model_name_or_path == "PKU-Alignment/beaver-7b-v1.0-reward"
    assert (a.critic_learning_rate, a.critic_min_learning_rate, a.critic_weight_decay) == (5e-06, 5e-07, 0.0)
    assert (a.critic_lr_scheduler_type, a.critic_warmup_ratio, a.critic_recompute) == ("constant", 0.03, True)
    assert (a.kl_coeff, a.clip_range_score, a.clip_range_value) == (0.02, 50.0, 5.0)
    assert a.normalize_reward is True and a.normalize_advantage is True
    assert (a.gamma, a.lam, a.kl_penalty, a.kl_ctrl_type, a.critic_warmup_steps) == (1.0, 0.95, "k3", "fixed", 0)


def test_llama_ppo_argument_json_runs_a_step_on_tiny_models(tiny_model_dir, prompts_file, ptx_file, letter_rm_dir,
                                                            tmp_path):
    s = Session.from_json(
        str(LLAMA_PPO),
        actor_model_name_or_path=tiny_model_dir,
        reward_model_name_or_path=letter_rm_dir,
        train_datasets=prompts_file,
        eval_datasets=None,  # PKU-SafeRLHF/test is not here
        ptx_datasets=ptx_file,
        max_length=64,
        max_dec_len=8,
        per_device_prompt_batch_size=2,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        max_steps=1,
        output_dir=str(tmp_path / "out"),
        logging_dir=str(tmp_path / "vdl"),
    )
    assert s.state.critic is not None and s.state.critic.source == letter_rm_dir  # PaddleNLP: critic from the RM
    assert [f.name for f in s.state.reward_fns] == ["reward_model"]
    assert s.state.reward_normalizer is not None and s.state.ptx_loss is not None
    metrics = s.step()
    for key in REQUIRED_METRICS:
        assert key in metrics, key
    assert metrics["kl/beta"] == pytest.approx(0.02)
    assert metrics["critic/lr"] == pytest.approx(5e-06)  # critic_lr_scheduler_type constant, not the actor's cosine
    s.close()
