"""Every key, type and default of PaddleNLP's schema (PADDLE_SCHEMA.md section 1) is a field here."""

import typing

from ppokit.args import Arguments, DataArguments, ModelArguments, PpokitArguments, TrainingArguments
from ppokit.args.fieldinfo import non_none
from ppokit.args.translate import IGNORED, RENAMES

# key -> (PaddleNLP type, default of the latest version that has it), copied from PADDLE_SCHEMA.md 1.1-1.5.
SCHEMA = {
    "actor_model_name_or_path": (str, None), "actor_tokenizer_alpha": (float, None),
    "chat_template": (str, "none"), "critic_model_name_or_path": (str, None),
    "critic_recompute_granularity": (str, "full"), "critic_tokenizer_alpha": (float, None),
    "fused_linear": (bool, True), "recompute_granularity": (str, "full"),
    "reward_model_name_or_path": (str, None), "reward_server": (str, None),
    "reward_tokenizer_alpha": (float, None), "stage": (str, "PPO"),
    "use_attn_mask_start_row_indices": (bool, False), "use_flash_attention": (bool, False),
    "eval_datasets": (str, None), "eval_split_ratio": (float, None), "max_length": (int, 2048),
    "max_prompt_len": (int, 4096), "prompt_key": (str, "src"), "ptx_datasets": (str, None),
    "response_key": (str, "tgt"), "train_datasets": (str, None),
    "attention_probs_dropout_prob": (float, 0.0), "autotuner_benchmark": (bool, False),
    "balance_batch": (bool, False), "clip_range_ratio": (float, 0.2), "clip_range_ratio_high": (float, None),
    "clip_range_ratio_low": (float, None), "clip_range_score": (float, 10.0), "clip_range_value": (float, 5.0),
    "critic_decay_steps": (int, None), "critic_learning_rate": (float, None),
    "critic_lr_scheduler_type": (str, None), "critic_min_learning_rate": (float, None),
    "critic_recompute": (bool, None), "critic_warmup_ratio": (float, None), "critic_weight_decay": (float, None),
    "decay_steps": (int, None), "dropout_warmup_steps": (int, 0), "dynamic_sampling": (bool, False),
    "early_stopping": (bool, False), "early_stopping_patience": (int, 4), "early_stopping_threshold": (float, 0.0),
    "enable_overlong_reward_buffer": (bool, False), "entropy_coeff": (float, 0.0), "eos_token": (str, ""),
    "eval_mode": (str, None), "global_batch_size": (int, 8), "global_gen_batch_size": (int, -1),
    "global_mini_batch_size": (int, -1), "hidden_dropout_prob": (float, 0.0), "kl_coeff": (float, 0.02),
    "kl_loss_coeff": (float, 0.001), "max_dec_len": (int, 512), "max_gen_batches": (int, 32),
    "max_src_len": (int, 3072), "min_dec_len": (int, 1), "min_learning_rate": (float, None),
    "normalize_advantage": (bool, None), "normalize_reward": (bool, None),
    "overlong_penalty_factor": (float, 1.0), "overlong_reward_buffer": (int, 256),
    "per_device_logprob_batch_size": (int, -1), "per_device_prompt_batch_size": (int, 16),
    "per_device_reward_batch_size": (int, -1), "per_device_rollout_batch_size": (int, -1),
    "per_device_sample_batch_size": (int, 16), "per_device_train_batch_size": (int, 1),
    "per_device_value_batch_size": (int, -1), "pg_loss_coeff": (float, 1.0), "ptx_coeff": (float, 0.0),
    "recompute_use_reentrant": (bool, True), "repetition_penalty": (float, 1.0), "rl_algorithm": (str, "ppo"),
    "rollout_max_num_seqs": (int, 8), "rollout_n": (int, 1), "rollout_quant_type": (str, ""),
    "rollout_tensor_parallel_degree": (int, -1), "temperature": (float, 1.0),
    "tensor_parallel_output": (bool, True), "top_p": (float, 1.0), "unified_checkpoint": (bool, False),
    "unified_checkpoint_config": (str, ""), "update_iters": (int, 1), "use_fp32_compute": (bool, False),
    "use_fused_head_and_loss_fn": (bool, False), "use_fused_rms_norm": (bool, False), "use_fusemt": (bool, True),
    "use_remove_padding": (bool, False), "use_rm_server": (bool, False), "use_rule_reward": (bool, False),
    "use_tgt_len_value": (bool, False), "no_recompute_layers": (list, None),
    "offload_recompute_inputs": (bool, False), "pp_recompute_interval": (int, 1),
    "use_fused_dropout_add": (bool, False), "use_fused_linear": (bool, False),
    "use_fused_linear_cross_entropy": (bool, False), "use_fused_rope": (bool, False), "virtual_pp_degree": (int, 1),
    "adam_beta1": (float, 0.9), "adam_beta2": (float, 0.999), "adam_epsilon": (float, 1e-08),
    "amp_custom_black_list": (list, None), "amp_custom_white_list": (list, None), "amp_master_grad": (bool, False),
    "bf16": (bool, False), "dataloader_drop_last": (bool, False), "dataloader_shuffle": (bool, True),
    "disable_tqdm": (bool, None), "do_eval": (bool, False), "do_train": (bool, False), "eval_steps": (int, None),
    "evaluation_strategy": (str, "no"), "fp16": (bool, False), "fp16_opt_level": (str, "O1"),
    "gradient_accumulation_steps": (int, 1), "ignore_save_lr_and_optim": (bool, False),
    "learning_rate": (float, 5e-05), "logging_steps": (int, 500), "lr_scheduler_type": (str, "linear"),
    "max_evaluate_steps": (int, -1), "max_grad_norm": (float, 1.0), "max_steps": (int, -1),
    "num_train_epochs": (float, 1.0), "offload_optim": (bool, False), "per_device_eval_batch_size": (int, 8),
    "pipeline_parallel_config": (str, ""), "pipeline_parallel_degree": (int, -1), "recompute": (bool, False),
    "release_grads": (bool, False), "report_to": (list, None), "run_name": (str, None), "save_steps": (int, 500),
    "save_strategy": (str, "steps"), "save_total_limit": (int, None), "seed": (int, 42),
    "sequence_parallel": (bool, False), "sharding": (str, ""), "sharding_parallel_config": (str, ""),
    "sharding_parallel_degree": (int, -1), "skip_profile_timer": (bool, True), "tensor_parallel_degree": (int, -1),
    "wandb_http_proxy": (str, None), "warmup_ratio": (float, 0.0), "weight_decay": (float, 0.0),
}
# Where ppokit deliberately differs from PaddleNLP's default (each documented in the field description).
PPOKIT_DEFAULTS = {"output_dir": "output", "logging_dir": "vdl_log", "top_k": 0, "offload_level": []}
# Renamed keys of the schema (older names) and README-only keys.
OLD_NAMES = {
    "reward_critic_model_name_or_path": "critic_model_name_or_path",
    "reward_critic_tokenizer_alpha": "critic_tokenizer_alpha", "label_key": "response_key",
    "mini_batch_size": "global_mini_batch_size", "num_return_sequences": "rollout_n",
    "quant_type": "rollout_quant_type", "rollout_logprob_batch_size": "per_device_logprob_batch_size",
    "max_seq_len": "max_length", "pretrain_critic_steps": "critic_warmup_steps",
}
README_KEYS = ("train_task_config", "eval_task_config", "ptx_task_config")


def _base_type(annotation):
    first = non_none(annotation)[0]
    if typing.get_origin(first) is typing.Literal:
        return str
    return typing.get_origin(first) or first


def test_every_schema_key_has_paddlenlp_default_and_type():
    fields = Arguments.model_fields
    for key, (typ, default) in SCHEMA.items():
        assert key in fields, key
        assert fields[key].get_default(call_default_factory=True) == default, key
        if key != "offload_level":
            assert _base_type(fields[key].annotation) is typ, key


def test_ppokit_defaults_that_differ_from_paddlenlp():
    for key, default in PPOKIT_DEFAULTS.items():
        assert Arguments.model_fields[key].get_default(call_default_factory=True) == default


def test_old_names_and_readme_keys():
    assert {k: v[0] for k, v in RENAMES.items()} == OLD_NAMES
    for key in README_KEYS:
        assert Arguments.model_fields[key].default is None


def test_every_field_has_a_one_line_description():
    for key, field in Arguments.model_fields.items():
        assert field.description and "\n" not in field.description, key
        assert field.description.endswith((".", ")")), key


def test_ignored_keys_are_fields_saying_no_effect():
    for key in IGNORED:
        assert key in Arguments.model_fields, key


def test_extension_defaults():
    expected = {
        "loss_agg_mode": "token-mean", "loss_agg_norm_constant": None, "norm_adv_by_std_in_grpo": True,
        "kl_loss_type": "k3", "kl_penalty": "k3", "kl_ctrl_type": "fixed", "target_kl": 6.0,
        "kl_horizon": 10000, "clip_ratio_c": None, "policy_loss": "vanilla", "gamma": 1.0, "lam": 0.95,
        "critic_warmup_steps": 0, "lora_rank": 0, "lora_alpha": 16, "lora_dropout": 0.0,
        "reward_functions": None, "reward_weights": None, "reward_on_error": "raise",
        "reward_server_token": None, "reward_timeout": 60.0, "reward_max_retries": 3, "rollout_engine": None,
        "eval_rollout_n": 1, "eval_temperature": 0.0, "force_resume": False, "top_k": 0, "task": None,
        "chunk_size": 1024, "train_data_size": None, "device": None, "resume_from_checkpoint": None,
    }
    for key, default in expected.items():
        assert key in PpokitArguments.model_fields, key
        assert Arguments.model_fields[key].default == default, key


def test_arguments_is_the_union_of_the_groups():
    groups = (ModelArguments, DataArguments, TrainingArguments, PpokitArguments)
    union = set().union(*(g.model_fields for g in groups))
    assert union == set(Arguments.model_fields)
    assert sum(len(g.model_fields) for g in groups) == len(Arguments.model_fields)  # no key in two groups
    assert Arguments.model_config["extra"] == "forbid" and Arguments.model_config["validate_assignment"]
