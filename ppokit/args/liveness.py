"""What assigning a key of a running Session's arguments does (`s.args.temperature = 0.7`).

Every key is one of:
- *live*: read again at the next rollout, scoring, advantage or update (sampling, loss and advantage settings,
  learning rates — the optimizers' param groups follow —, the KL coefficients and the controller's target, reward
  shaping, evaluation, logging and save cadence); the assignment is checked by the same cross-key rules as a file;
- *restart*: fixed when the Session is built (models, data, batch geometry, the run's length and schedule shape,
  parallelism, precision, output folders); assigning one is refused with a sentence saying how to change it;
- *derived*: computed from other keys; assigning it is refused, naming the key to set instead;
- *no effect*: accepted from files for PaddleNLP compatibility and never read; assigning one is refused with why.
"""

from __future__ import annotations

import math
from typing import Any

from .arguments import Arguments, AssignmentError
from .checks import check_lengths, consistency_errors
from .errors import ConfigError
from .history import early_errors
from .translate import IGNORED, NO_EFFECT

LIVE = frozenset({
    # sampling (read by every rollout) and evaluation
    "temperature", "top_p", "top_k", "repetition_penalty", "min_dec_len", "max_dec_len", "eval_temperature",
    "eval_rollout_n", "max_evaluate_steps", "per_device_eval_batch_size", "do_eval",
    "evaluation_strategy", "eval_steps", "eval_datasets", "eval_task_config",
    # losses (LossConfig is resolved once per update)
    "clip_range_ratio", "clip_range_ratio_low", "clip_range_ratio_high", "clip_ratio_c", "clip_range_value",
    "loss_agg_mode", "loss_agg_norm_constant", "pg_loss_coeff", "kl_loss_coeff", "kl_loss_type", "entropy_coeff",
    "policy_loss", "rollout_is", "rollout_is_cap", "positive_lm_coeff", "chunk_size",
    # advantages, KL in the reward and its controller
    "gamma", "lam", "lam_critic", "norm_adv_by_std_in_grpo", "normalize_advantage", "length_adaptive_alpha",
    "kl_coeff", "kl_penalty", "target_kl", "kl_horizon",
    # rewards
    "clip_range_score", "enable_overlong_reward_buffer", "overlong_reward_buffer", "overlong_penalty_factor",
    # optimisation that the optimizers take from the arguments each update
    "learning_rate", "critic_learning_rate", "critic_warmup_steps", "max_gen_batches",
    # logging and checkpoints (read by the train loop at every step)
    "logging_steps", "logging_strategy", "save_steps", "save_strategy", "save_total_limit",
})

# key -> what to set instead
DERIVED = {
    "max_src_len": "max_prompt_len (PaddleNLP's run script copies it into max_src_len)",
    "rollout_tensor_parallel_degree": "tensor_parallel_degree when building a Session",
}

RESTART_HINT = ("it is fixed when the Session is built ({why}); build a new Session with it, e.g. "
                "Session.from_json(path, {key}=...), or continue this run with Session.resume(output_dir, {key}=...)")
RESTART_WHY = {
    "model": "the models are loaded with it", "data": "the prompts are read and encoded with it",
    "batch": "the batch plan and the optimizers' accumulation are built from it",
    "run": "the run plan (its length and the LR schedules) is computed from it",
    "parallel": "DeepSpeed and the rollout engine are set up with it", "output": "the run's files are opened with it",
    "other": "the objects built from it do not read it again",
}
RESTART_GROUPS = {
    "batch": ("global_batch_size", "global_mini_batch_size", "global_gen_batch_size", "per_device_prompt_batch_size",
              "per_device_sample_batch_size", "per_device_train_batch_size", "gradient_accumulation_steps",
              "update_iters", "rollout_n", "dynamic_sampling", "per_device_rollout_batch_size",
              "per_device_logprob_batch_size", "per_device_value_batch_size"),
    "run": ("max_steps", "num_train_epochs", "lr_scheduler_type", "warmup_ratio", "warmup_steps",
            "min_learning_rate", "decay_steps", "critic_lr_scheduler_type", "critic_warmup_ratio",
            "critic_min_learning_rate", "critic_decay_steps", "weight_decay", "critic_weight_decay", "adam_beta1",
            "adam_beta2", "adam_epsilon", "max_grad_norm"),
    "parallel": ("sharding", "offload_level", "tensor_parallel_degree", "pipeline_parallel_degree", "rollout_engine",
                 "use_fusemt", "device", "bf16", "fp16", "recompute", "critic_recompute", "use_flash_attention"),
    "output": ("output_dir", "logging_dir", "report_to", "run_name", "disable_tqdm"),
    "data": ("train_datasets", "ptx_datasets", "train_task_config",
             "prompt_key", "response_key", "max_prompt_len", "max_length", "chat_template", "train_data_size",
             "dataloader_shuffle", "dataloader_drop_last", "seed"),
}


def liveness(key: str) -> str:
    """'live', 'restart', 'derived' or 'no effect' for an argument name."""
    if key in IGNORED:
        return "no effect"
    if key in LIVE:
        return "live"
    if key in DERIVED:
        return "derived"
    return "restart"


def restart_reason(key: str) -> str:
    """Why `key` is fixed once the Session is built."""
    if key.endswith("_model_name_or_path") or key.startswith("lora_"):
        return RESTART_WHY["model"]
    group = next((g for g, keys in RESTART_GROUPS.items() if key in keys), "other")
    return RESTART_WHY[group]


def describe(key: str) -> str:
    """The one line `python -m ppokit.args explain KEY` prints about assigning `key` in a running Session."""
    kind = liveness(key)
    if kind == "live":
        return "live: a change to s.args takes effect at the next rollout / update"
    if kind == "derived":
        return f"derived: computed by ppokit; set {DERIVED[key]}"
    if kind == "no effect":
        return f"no effect: {NO_EFFECT}, because {IGNORED[key]}"
    return f"restart: {RESTART_HINT.format(why=restart_reason(key), key=key)}"


def refusal(key: str, value) -> str | None:
    """The sentence that refuses `s.args.<key> = value` in a running Session, or None when it is live."""
    kind = liveness(key)
    if kind == "live":
        return None
    if kind == "derived":
        return f"{key} is derived, not set: assign {DERIVED[key]} instead."
    if kind == "no effect":
        return f"{key}={value!r} would change nothing: {NO_EFFECT}, because {IGNORED[key]}."
    return f"{key}={value!r} cannot change in a running Session: " + RESTART_HINT.format(
        why=restart_reason(key), key=key) + "."


def guard(args: Arguments, name: str, value: Any) -> None:
    """A running Session's `s.args.<name> = value`: a live key passes the same cross-key rules as a file (and is
    put back when it breaks one), any other key is refused (`refusal`). Installed by the Session on its args."""
    refused = refusal(name, value)
    if refused is not None:
        raise AssignmentError(refused)
    if isinstance(value, float) and not math.isfinite(value):
        raise AssignmentError(f"{name}={value!r} is not a finite number; {name} is still {getattr(args, name)!r}.")
    old = getattr(args, name)
    before = set(consistency_errors(args) + early_errors(args))
    args._assign(name, value)
    try:
        check_lengths(args, None)
        problems = [p for p in consistency_errors(args) + early_errors(args) if p not in before]
    except ConfigError as exc:
        problems = [str(exc)]
    if problems:
        args._assign(name, old)
        raise AssignmentError(f"{name}={value!r} is refused: {problems[0]} ({name} is still {old!r}.)")
