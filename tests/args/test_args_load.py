"""Loading files (PaddleNLP's, ppokit's), aliases, notes and source precedence."""

import json
import logging
from pathlib import Path

import pytest

from ppokit.args import Arguments, ConfigError, batch_plan, check_lengths, load_arguments
from ppokit.args.arguments import AssignmentError
from ppokit.args.translate import RENAMES

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "paddle"

CONFIGS = sorted(p for p in (ROOT / "config").rglob("*") if p.suffix in (".json", ".yaml", ".yml"))


def test_llama_ppo_843739d2f_loads_unchanged():
    args = load_arguments(FIXTURES / "llama_ppo_argument_843739d2f.json")
    assert args.rl_algorithm == "ppo" and args.rollout_n == 1
    assert args.ptx_datasets == "alpaca" and args.ptx_coeff == 16.0  # PaddleNLP E5 itself rejected these
    assert args.normalize_reward is True and args.normalize_advantage is True  # not forced for ppo
    assert args.offload_level == [] and args.eval_mode is None
    assert args.max_prompt_len == 1024 and args.max_src_len == 1024  # 2048 - 1024: 4096 would not fit
    assert args.fused_linear is True and args.bf16 is True and args.top_p == 0.8
    assert args.report_to == ["visualdl"] and args.disable_tqdm is True
    assert any(n.startswith("max_prompt_len not given") for n in args.notes)


def test_llama_grpo_3b97a283e_loads_unchanged():
    path = FIXTURES / "llama_grpo_argument_3b97a283e.json"
    args = load_arguments(path)
    assert args.rollout_n == 8 and args.response_key == "tgt"  # num_return_sequences, label_key
    assert args.normalize_reward is False and args.normalize_advantage is False  # forced for grpo
    assert args.offload_level == ["freeze_model", "optimizer", "train_model"]
    assert args.eval_mode == "single" and args.gradient_accumulation_steps == 32
    assert args.reward_model_name_or_path == "" and args.use_rm_server is True
    assert f"{path}: 'num_return_sequences' is the PaddleNLP E0-E4 name of 'rollout_n'; read as rollout_n=8." in args.notes
    assert ("Accepted for PaddleNLP compatibility; no effect here: fused_linear, pipeline_parallel_config, "
            "pipeline_parallel_degree, recompute_granularity, release_grads, sequence_parallel, "
            "sharding_parallel_degree, tensor_parallel_output, use_fused_head_and_loss_fn.") in args.notes
    assert ("eval_mode='single': accepted for PaddleNLP compatibility; no effect here, because ppokit evaluates "
            "with the training actor.") in args.notes


def test_qwen_grpo_yaml_c7d44f2bf_loads_unchanged():
    args = load_arguments(FIXTURES / "qwen_grpo_argument_c7d44f2bf.yaml")
    assert args.learning_rate == 1e-6 and args.adam_epsilon == 1e-8  # PyYAML reads 1e-6 as a string
    assert args.report_to == ["wandb"] and args.wandb_http_proxy == ""
    assert args.amp_custom_black_list[0] == "reduce_sum"
    assert args.global_mini_batch_size == 8 and args.gradient_accumulation_steps == 8  # 8 x 8 / 1 / 8
    assert args.per_device_rollout_batch_size == 8 and args.global_gen_batch_size == 8
    assert args.clip_range_ratio_high == 0.28 and args.rollout_max_num_seqs == 32
    assert batch_plan(args).mode == "global"


def test_oldest_ppo_config_with_comment_key_loads():
    path = FIXTURES / "ppo_config_d4de12c76.json"
    args = load_arguments(path)
    assert args.max_grad_norm == 1.0 and args.sharding == "stage3"
    assert f"{path}: comment key 'comment-PKU_Beaver-max_grad_norm' ignored." in args.notes


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_config_file_loads_and_fits(path):
    args = load_arguments(path)
    check_lengths(args, None)
    assert batch_plan(args).optimizer_steps_per_rollout >= 1


def test_default_cpu_grpo_config():
    args = load_arguments(ROOT / "config" / "grpo_argument.json")
    plan = batch_plan(args)
    assert (plan.prompts_per_step, plan.sequences_per_step, plan.gradient_accumulation_steps) == (8, 32, 2)
    assert args.kl_loss_coeff == 0.0 and not args.needs_reference
    assert "KL to the reference model is off (kl_loss_coeff=0): no reference model is needed." in args.notes


ALIAS_VALUES = {
    "num_return_sequences": 4, "reward_critic_model_name_or_path": "critic-x",
    "reward_critic_tokenizer_alpha": 0.1, "label_key": "answer", "mini_batch_size": 4,
    "quant_type": "weight_only_int8", "rollout_logprob_batch_size": "4", "max_seq_len": 1024,
    "pretrain_critic_steps": 5,
}


@pytest.mark.parametrize("old", sorted(RENAMES))
def test_every_alias_maps_to_its_new_name(old):
    new, origin = RENAMES[old]
    args = load_arguments(overrides={old: ALIAS_VALUES[old], "global_batch_size": 8})
    expected = 4 if old == "rollout_logprob_batch_size" else ALIAS_VALUES[old]
    assert getattr(args, new) == expected
    assert f"overrides: '{old}' is the {origin} of '{new}'; read as {new}={ALIAS_VALUES[old]!r}." in args.notes


def test_old_and_new_name_together_is_refused(tmp_path):
    path = tmp_path / "both.json"
    path.write_text(json.dumps({"num_return_sequences": 4, "rollout_n": 8}))
    with pytest.raises(ConfigError) as info:
        load_arguments(path)
    assert str(info.value) == (f"{path}: both 'num_return_sequences' and 'rollout_n' are given; "
                               "'num_return_sequences' is the PaddleNLP E0-E4 name of 'rollout_n', keep only 'rollout_n'.")


def test_old_name_in_file_new_name_on_command_line(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"num_return_sequences": 4, "global_batch_size": 8}))
    assert load_arguments(path, argv=["--rollout_n", "6"]).rollout_n == 6


def test_readme_task_config_keys_and_max_seq_len():
    args = load_arguments(overrides={"train_task_config": "config/task_ppo.json", "eval_task_config": "e.json",
                                     "ptx_task_config": "p.json", "max_seq_len": 1024})
    assert (args.train_task_config, args.eval_task_config, args.ptx_task_config) == (
        "config/task_ppo.json", "e.json", "p.json")
    assert args.max_length == 1024


@pytest.mark.parametrize(("value", "estimator"), [("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3"), ("abs", "abs")])
def test_verl_kl_estimator_names(value, estimator):
    args = load_arguments(overrides={"kl_loss_type": value, "kl_penalty": value})
    assert args.kl_loss_type == estimator and args.kl_penalty == estimator
    noted = f"overrides: kl_penalty='{value}' is verl's name of estimator '{estimator}'." in args.notes
    assert noted == (value != "abs")


def test_assignment_is_validated_and_translates_verl_names():
    args = load_arguments()
    args.temperature = 0.7
    args.kl_penalty = "mse"
    assert args.temperature == 0.7 and args.kl_penalty == "k2"
    with pytest.raises(AssignmentError, match=r"^temperature='hot' is not valid: expected float .*; temperature "
                       r"is still 0\.7\.$"):
        args.temperature = "hot"
    with pytest.raises(AssignmentError, match="^there is no argument 'no_such_key'"):
        args.no_such_key = 1


def test_paddle_only_switch_notes():
    args = load_arguments(overrides={"fused_linear": False, "use_fused_rope": False, "pipeline_parallel_degree": 1,
                                     "use_remove_padding": True})
    assert ("fused_linear=False: accepted for PaddleNLP compatibility; no effect here, because ppokit runs "
            "PyTorch/transformers kernels.") in args.notes
    assert ("use_remove_padding=True: accepted for PaddleNLP compatibility; no effect here, because ppokit masks "
            "padding with attention masks.") in args.notes
    assert ("Accepted for PaddleNLP compatibility; no effect here: pipeline_parallel_degree, "
            "use_fused_rope.") in args.notes


def test_notes_are_logged_once(caplog, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"comment-logged-once": 1}))
    with caplog.at_level(logging.INFO, logger="ppokit"):
        load_arguments(path)
        load_arguments(path)
    assert [r.getMessage() for r in caplog.records].count(f"{path}: comment key 'comment-logged-once' ignored.") == 1


def test_json_null_is_none_for_optional_keys(tmp_path):
    path = tmp_path / "n.json"
    path.write_text('{"critic_learning_rate": null, "eval_steps": null, "reward_weights": null}')
    args = load_arguments(path)
    assert args.critic_learning_rate is None and args.reward_weights is None


def test_paddle_device_spelling():
    args = load_arguments(overrides={"device": "gpu:1"})
    assert args.device == "cuda:1"
    assert "overrides: device='gpu:1' (PaddleNLP spelling) read as 'cuda:1'." in args.notes


def test_precedence_file_then_command_line_then_overrides(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("max_steps: 3\nseed: 1\nlogging_steps: 7\n")
    args = load_arguments(path, overrides={"seed": 3}, argv=["--seed", "2", "--max_steps=4"])
    assert (args.max_steps, args.seed, args.logging_steps) == (4, 3, 7)


def test_leading_path_in_argv(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"max_steps": 3}')
    assert load_arguments(argv=[str(path), "--seed", "5"]).max_steps == 3


def test_to_dict_is_json_and_has_every_field():
    data = load_arguments(overrides={"rl_algorithm": "grpo", "rollout_n": 4, "global_batch_size": 2}).to_dict()
    assert set(data) == set(Arguments.model_fields)
    assert json.loads(json.dumps(data)) == data
    assert data["offload_level"] == [] and data["rollout_n"] == 4


def test_empty_yaml_file_is_refused_naming_it(tmp_path):
    path = Path(tmp_path / "empty.yaml")
    path.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="empty.yaml: the argument file is empty"):  # usually a truncated copy
        load_arguments(path)


@pytest.mark.parametrize("name", ["llama_grpo_argument_3b97a283e.json", "qwen_grpo_argument_c7d44f2bf.yaml"])
def test_to_config_round_trip_keeps_the_batch_mode(name):
    args = load_arguments(FIXTURES / name)
    args.temperature = 0.5
    again = load_arguments(overrides=args.to_config())
    assert again.to_dict() == args.to_dict()
    assert batch_plan(again) == batch_plan(args)
