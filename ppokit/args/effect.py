"""What a person reads first, and what does nothing in this run: the order of keys by what matters (model, data,
algorithm, batch, lengths, rewards, tools, then the rest) and the keys that have no effect in one configuration.

`--print_config`, `python -m ppokit.args list`, VisualDL's hyper-parameter table and `args translate --to verl`
read these two tables, so they agree on what a key does in a run. `inactive(args)` is conservative: a key is folded
only where the code that would read it does not run in this configuration (no critic, KL not in the reward, no
tools, no judge, ...), never where it merely keeps its default. Plain data and `ppokit.algorithms`: no torch.
"""

from __future__ import annotations

import json
from typing import Any

from ppokit.algorithms import algorithm

from .translate import IGNORED

SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("model", ("actor_model_name_or_path", "critic_model_name_or_path", "reward_model_name_or_path",
               "chat_template", "lora_rank", "lora_alpha", "lora_dropout")),
    ("data", ("train_datasets", "eval_datasets", "ptx_datasets", "train_task_config", "eval_task_config",
              "ptx_task_config", "task", "prompt_key", "response_key", "train_data_size", "eval_split_ratio",
              "dataloader_shuffle", "dataloader_drop_last")),
    ("algorithm", ("rl_algorithm", "policy_loss", "loss_agg_mode", "loss_agg_norm_constant", "kl_loss_coeff",
                   "kl_loss_type", "kl_coeff", "kl_penalty", "kl_ctrl_type", "target_kl", "kl_horizon",
                   "clip_range_ratio", "clip_range_ratio_low", "clip_range_ratio_high", "clip_ratio_c",
                   "clip_range_value", "entropy_coeff", "pg_loss_coeff", "ptx_coeff", "positive_lm_coeff", "gamma",
                   "lam", "lam_critic", "length_adaptive_alpha", "norm_adv_by_std_in_grpo", "normalize_advantage",
                   "normalize_reward", "rollout_is", "rollout_is_cap", "dynamic_sampling", "max_gen_batches")),
    ("batch", ("global_batch_size", "rollout_n", "global_mini_batch_size", "global_gen_batch_size", "update_iters",
               "per_device_prompt_batch_size", "per_device_sample_batch_size", "per_device_train_batch_size",
               "gradient_accumulation_steps", "per_device_rollout_batch_size", "per_device_logprob_batch_size",
               "per_device_reward_batch_size", "per_device_value_batch_size", "per_device_eval_batch_size")),
    ("lengths", ("max_prompt_len", "max_dec_len", "min_dec_len", "max_length", "max_src_len",
                 "temperature", "top_p", "top_k", "repetition_penalty", "eos_token")),
    ("rewards", ("use_rule_reward", "reward_functions", "reward_weights", "use_rm_server", "reward_server",
                 "reward_server_token", "judge_model", "reward_timeout", "reward_max_retries", "reward_on_error",
                 "clip_range_score", "enable_overlong_reward_buffer", "overlong_reward_buffer",
                 "overlong_penalty_factor")),
    ("tools", ("multi_turn", "tools", "tool_config_path", "tool_format", "max_assistant_turns",
               "max_tool_response_length", "max_parallel_calls", "tool_timeout")),
    ("run", ("max_steps", "num_train_epochs", "learning_rate", "lr_scheduler_type", "warmup_ratio", "warmup_steps",
             "min_learning_rate", "decay_steps", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon",
             "max_grad_norm", "seed")),
)
JUDGE_KEYS = ("judge_backend", "judge_api_model", "judge_allow_remote", "judge_template", "judge_parser",
              "judge_rubric", "judge_score_range", "judge_max_new_tokens", "judge_temperature", "judge_batch_size",
              "judge_concurrency")
CRITIC_KEYS = ("critic_model_name_or_path", "critic_learning_rate", "critic_weight_decay", "critic_lr_scheduler_type",
               "critic_warmup_ratio", "critic_recompute", "critic_min_learning_rate", "critic_decay_steps",
               "critic_warmup_steps", "per_device_value_batch_size", "clip_range_value", "lam_critic")
TOOL_KEYS = ("tools", "tool_config_path", "tool_format", "max_assistant_turns", "max_tool_response_length",
             "max_parallel_calls", "tool_timeout")
EVAL_KEYS = ("eval_steps", "eval_rollout_n", "eval_temperature", "max_evaluate_steps", "per_device_eval_batch_size")
KL_REWARD_KEYS = ("kl_penalty", "kl_ctrl_type", "target_kl", "kl_horizon")
# estimator -> the advantage inputs it reads (algos/advantages.py; kept here so that args imports no torch)
ESTIMATOR_READS = {"gae": ("gamma", "lam"), "vapo": ("gamma", "lam", "lam_critic", "length_adaptive_alpha"),
                   "grpo": ("norm_adv_by_std_in_grpo",), "drgrpo": ("norm_adv_by_std_in_grpo",), "rloo": (),
                   "reinforce_plus_plus": ("gamma",), "reinforce_plus_plus_baseline": ("gamma",)}
ESTIMATOR_KEYS = ("gamma", "lam", "lam_critic", "length_adaptive_alpha", "norm_adv_by_std_in_grpo")


def ordered_keys(keys) -> list[str]:
    """`keys` in reading order: the SECTIONS' keys in their order, then the others in their given order."""
    keys = list(keys)
    present = set(keys)
    first = [k for _, names in SECTIONS for k in names if k in present]
    seen = set(first)
    return first + [k for k in keys if k not in seen]


def section_of(key: str) -> str:
    """The SECTIONS name of `key`, or "other"."""
    return next((name for name, keys in SECTIONS if key in keys), "other")


def inactive(args: Any) -> dict[str, str]:
    """{key: why it has no effect in this configuration} for an `Arguments` (see the module docstring)."""
    out = {key: f"no effect in ppokit ({why})" for key, why in IGNORED.items()}
    algo = algorithm(args.rl_algorithm)
    name = args.rl_algorithm
    if not algo.needs_critic:
        out.update({k: f"no critic: rl_algorithm={name} trains none" for k in CRITIC_KEYS})
    if not algo.kl_in_reward:
        out["kl_coeff"] = f"rl_algorithm={name} puts no KL in the reward (kl_loss_coeff is its KL term)"
    if not (algo.kl_in_reward and args.kl_coeff > 0):
        out.update({k: "no KL in the reward (kl_coeff applies only to ppo, vapo and reinforce_plus_plus*)"
                    if not algo.kl_in_reward else "kl_coeff=0: no KL in the reward" for k in KL_REWARD_KEYS})
    if args.kl_loss_coeff <= 0:
        out["kl_loss_type"] = "kl_loss_coeff=0: no KL loss"
    reads = ESTIMATOR_READS.get(algo.estimator, ESTIMATOR_KEYS)
    out.update({k: f"the {algo.estimator} advantage does not read it" for k in ESTIMATOR_KEYS if k not in reads})
    if not args.multi_turn:
        out.update({k: "multi_turn is off: rollouts are single-turn" for k in TOOL_KEYS})
    if not args.judge_model:
        out.update({k: "no judge_model" for k in JUDGE_KEYS})
    if not args.use_rm_server:
        out.update({k: "use_rm_server is off" for k in ("reward_server", "reward_server_token")})
    if not args.do_eval:
        out.update({k: "do_eval is off" for k in EVAL_KEYS})
    if not args.lora_rank:
        out.update({k: "lora_rank=0: no LoRA" for k in ("lora_alpha", "lora_dropout")})
    if not args.staleness_threshold:
        out.update({k: "staleness_threshold=0: no asynchronous producer" for k in ("async_producer",)})
    if not args.enable_overlong_reward_buffer:
        out.update({k: "enable_overlong_reward_buffer is off" for k in ("overlong_reward_buffer",
                                                                          "overlong_penalty_factor")})
    if not args.dynamic_sampling:
        out["max_gen_batches"] = "dynamic_sampling is off"
    if args.loss_agg_mode != "seq-mean-token-sum-norm":
        out["loss_agg_norm_constant"] = f"loss_agg_mode={args.loss_agg_mode} has no normalising constant"
    if args.ptx_coeff <= 0:
        out.update({k: "ptx_coeff=0: no supervised loss" for k in ("ptx_datasets", "ptx_task_config")})
    if args.rollout_engine == "hf":
        out["gpu_memory_utilization"] = "rollout_engine=hf: no vLLM engine"
    if str(getattr(args.save_strategy, "value", args.save_strategy)) == "no":
        out.update({k: "save_strategy=no" for k in ("save_steps", "save_total_limit")})
    return {k: v for k, v in out.items() if k in type(args).model_fields}


def folded(args: Any, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(the keys with an effect, in reading order; {why: "key=value, ..."} of the others, one line per reason) of
    `values` (args.to_dict())."""
    off = inactive(args)
    shown = {k: values[k] for k in ordered_keys(values) if k not in off}
    hidden: dict[str, list[str]] = {}
    for key in ordered_keys(values):
        if key in off:
            why = "accepted for PaddleNLP compatibility, no effect in ppokit" if key in IGNORED else off[key]
            hidden.setdefault(why, []).append(f"{key}={json.dumps(values[key])}")
    return shown, {why: ", ".join(keys) for why, keys in hidden.items()}
