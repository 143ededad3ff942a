"""PaddleNLP's post-init rules, applied once by load_arguments."""

import pytest

from ppokit.args import load_arguments

GRPO = {"rl_algorithm": "grpo", "rollout_n": 8, "global_batch_size": 8}


@pytest.mark.parametrize("algorithm", ["grpo", "drgrpo", "dapo", "rloo"])
def test_group_algorithms_turn_normalisation_off(algorithm):
    args = load_arguments(overrides={**GRPO, "rl_algorithm": algorithm, "normalize_reward": True,
                                     "normalize_advantage": 1})
    assert args.normalize_reward is False and args.normalize_advantage is False
    assert (f"normalize_reward is turned off for rl_algorithm={algorithm}: group-relative advantages are "
            "already normalised (PaddleNLP does the same for grpo).") in args.notes


@pytest.mark.parametrize("algorithm", ["ppo", "reinforce_plus_plus"])
def test_other_algorithms_keep_normalisation(algorithm):
    args = load_arguments(overrides={"rl_algorithm": algorithm, "normalize_reward": True, "normalize_advantage": True})
    assert args.normalize_reward is True and args.normalize_advantage is True


def test_offload_level_split_and_eval_mode_empty():
    args = load_arguments(overrides={"offload_level": "freeze_model  optimizer", "eval_mode": ""})
    assert args.offload_level == ["freeze_model", "optimizer"] and args.eval_mode is None
    args.offload_level = "train_model"
    assert args.offload_level == ["train_model"]


def test_evaluation_strategy_forces_do_eval_and_eval_steps_falls_back():
    args = load_arguments(overrides={"evaluation_strategy": "steps", "logging_steps": 5})
    assert args.do_eval is True and args.eval_steps == 5


def test_do_eval_forces_steps_strategy():
    args = load_arguments(overrides={"do_eval": True, "eval_steps": 0, "logging_steps": 3})
    assert args.evaluation_strategy == "steps" and args.eval_steps == 3


def test_explicit_eval_steps_are_kept_and_no_eval_by_default():
    assert load_arguments(overrides={"do_eval": True, "eval_steps": 9}).eval_steps == 9
    args = load_arguments()
    assert args.do_eval is False and args.evaluation_strategy == "no" and args.eval_steps is None


@pytest.mark.parametrize(("value", "expected"), [
    (None, ["visualdl"]), ("none", []), ("wandb", ["wandb"]), ("visualdl,wandb", ["visualdl", "wandb"]),
    (["tensorboard"], ["tensorboard"]), ("all", ["all"])])
def test_report_to(value, expected):
    assert load_arguments(overrides={"report_to": value}).report_to == expected


def test_simple_base_defaults_resolved():
    args = load_arguments(overrides={"max_steps": 30, "tensor_parallel_degree": 2})
    assert args.disable_tqdm is False and args.decay_steps == 30 and args.rollout_tensor_parallel_degree == 2
    args = load_arguments(overrides={"rollout_tensor_parallel_degree": 4})
    assert args.rollout_tensor_parallel_degree == 4 and args.decay_steps is None
    assert load_arguments().rollout_tensor_parallel_degree == 1


def test_max_src_len_follows_max_prompt_len():
    args = load_arguments(overrides={"max_prompt_len": 300, "max_src_len": 100, "max_length": 1000})
    assert args.max_src_len == 300
    assert "max_src_len=100 is replaced by max_prompt_len=300 (as PaddleNLP's run script does)." in args.notes


def test_max_prompt_len_derived_only_when_not_given():
    args = load_arguments(overrides={"max_length": 1000, "max_dec_len": 200})
    assert args.max_prompt_len == 800 and args.max_src_len == 800
    assert load_arguments(overrides={"max_length": 1000, "max_prompt_len": 900}).max_prompt_len == 900


def test_per_device_pass_batch_sizes_default_to_micro_batch():
    args = load_arguments(overrides={"per_device_train_batch_size": 4, "per_device_reward_batch_size": 2,
                                     "gradient_accumulation_steps": 4})
    assert (args.per_device_logprob_batch_size, args.per_device_reward_batch_size,
            args.per_device_value_batch_size) == (4, 2, 4)
    assert args.per_device_rollout_batch_size == 4  # per-device mode (E2-E5 rule)


def test_global_mode_computes_accumulation_and_rollout_batch(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    args = load_arguments(overrides={**GRPO, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 3,
                                     "per_device_prompt_batch_size": 2})
    assert args.gradient_accumulation_steps == 8  # 8 prompts x 8 / 2 ranks / 4 per micro-batch
    assert args.per_device_rollout_batch_size == 4 and args.global_mini_batch_size == 8  # 8 // 2; <0 -> 8
    assert ("gradient_accumulation_steps=3 is replaced by 8, computed from global_mini_batch_size "
            "(as PaddleNLP E5+ does).") in args.notes
    assert "per_device_prompt_batch_size is ignored because global_batch_size is set (as in PaddleNLP E5+)." in args.notes


def test_per_device_mode_keeps_accumulation_and_notes_global_keys():
    args = load_arguments(overrides={"gradient_accumulation_steps": 4, "per_device_train_batch_size": 2,
                                     "per_device_prompt_batch_size": 8, "global_mini_batch_size": 4})
    assert args.gradient_accumulation_steps == 4 and args.global_mini_batch_size == 4
    assert ("global_mini_batch_size is ignored because global_batch_size is not set (per-device batch sizes "
            "apply).") in args.notes


def test_max_steps_note_when_several_optimizer_steps_per_rollout():
    args = load_arguments(overrides={**GRPO, "global_mini_batch_size": 4, "max_steps": 10})
    assert ("max_steps=10 counts rollout steps; each makes 2 optimizer steps (PaddleNLP counted optimizer "
            "steps).") in args.notes


def test_output_dir_and_do_train_notes():
    args = load_arguments(overrides={"do_train": False})
    assert "output_dir not given: using 'output' (PaddleNLP requires the key)." in args.notes
    assert "do_train is false: PaddleNLP would skip training; run_ppo.py trains anyway." in args.notes
    assert args.output_dir == "output" and args.logging_dir == "vdl_log"


def test_kl_off_note_and_properties():
    ppo = load_arguments(overrides={"kl_coeff": 0.0, "kl_loss_coeff": 0.0})
    assert "KL to the reference model is off (kl_loss_coeff=0 and kl_coeff=0): no reference model is needed." in ppo.notes
    assert ppo.use_kl_in_reward and not ppo.group_algorithm and not ppo.needs_reference
    grpo = load_arguments(overrides=GRPO)
    assert grpo.group_algorithm and not grpo.use_kl_in_reward and grpo.needs_reference


def test_the_algorithm_table_is_what_args_accept():
    from typing import get_args

    from ppokit.algorithms import ALGORITHMS, GROUP_ALGORITHMS
    from ppokit.args.training_rl import RlAlgorithm

    assert get_args(RlAlgorithm) == tuple(ALGORITHMS)
    assert GROUP_ALGORITHMS == {"grpo", "drgrpo", "dapo", "rloo", "reinforce_plus_plus_baseline"}
    assert [n for n, a in ALGORITHMS.items() if a.needs_critic] == ["ppo", "vapo"]
    for name in ALGORITHMS:
        args = load_arguments(overrides={**GRPO, "rl_algorithm": name})
        assert args.group_algorithm == ALGORITHMS[name].needs_groups
