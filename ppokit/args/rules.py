"""PaddleNLP's post-init rules (TrainingArguments.__post_init__, process_args, the base class), written
once: ``derive`` returns the values they change and a note for each change a user may not expect."""

from __future__ import annotations

from typing import Any

from ppokit.algorithms import ALGORITHMS, NORM_OFF_ALGORITHMS, algorithm

from .arguments import Arguments
from .batch import batch_plan
from .errors import ConfigError

# NORM_OFF_ALGORITHMS (the table's normalize_off): PaddleNLP turns normalize_reward/advantage off for grpo; ppokit
# does so for its group variants too.


def derive(args: Arguments, world_size: int) -> tuple[dict[str, Any], list[str]]:
    """The derived values of ``args`` on ``world_size`` ranks and the notes explaining them.
    Raises ConfigError when the batch sizes do not divide."""
    updates: dict[str, Any] = {}
    notes: list[str] = []
    _batch_rules(args, world_size, updates, notes)
    _eval_rules(args, updates)
    _eval_batch_cap(args, world_size, updates, notes)
    _misc_rules(args, updates, notes)
    _algorithm_presets(args, updates, notes)
    _overlong_buffer(args, updates, notes)
    notes += idle_keys(args)
    return updates, notes


def idle_keys(args: Arguments) -> list[str]:
    """A note for each key the user set that this configuration never reads (said once, when the arguments load):
    tools without multi_turn; of the asynchronous rollouts (docs/async.md), the producer thread runs only beside an
    update (k >= 1), partial_rollout acts only on a generation that overlaps one (the thread),
    partial_rollout_token only schedules partial_rollout: switch."""
    given, k = args.model_fields_set, args.staleness_threshold
    threaded = k >= 1 and args.async_producer == "thread"
    notes = []
    for key in ("tools", "tool_config_path"):
        if getattr(args, key) and not args.multi_turn:
            notes.append(f"{key} has no effect without multi_turn: true (rollouts stay single-turn, no tool is "
                         "offered); set multi_turn: true to use it.")
    if args.async_producer == "thread" and k == 0:
        notes.append("async_producer=thread has no effect: staleness_threshold=0 is the synchronous step, nothing is "
                     "generated beside the update; set staleness_threshold >= 1 to overlap them.")
    if "partial_rollout" in given and args.partial_rollout == "finish" and not threaded:
        notes.append("partial_rollout=finish has no effect: only the producer thread (staleness_threshold >= 1, "
                     "async_producer: thread) generates while an update runs.")
    if args.partial_rollout_token is not None and args.partial_rollout != "switch":
        notes.append(f"partial_rollout_token={args.partial_rollout_token} has no effect: it schedules the weight "
                     f"switch of partial_rollout: switch, and partial_rollout is {args.partial_rollout}; set "
                     "partial_rollout: switch (with staleness_threshold >= 1 and async_producer: thread).")
    return notes


# What the papers' recipes set (the algorithm table's presets), applied only to keys the user did not set.
ALGORITHM_PRESETS = {name: dict(a.presets) for name, a in ALGORITHMS.items() if a.presets}


def _algorithm_presets(args: Arguments, updates: dict, notes: list[str]) -> None:
    preset = ALGORITHM_PRESETS.get(args.rl_algorithm, {})
    applied = {k: v for k, v in preset.items() if k not in args.model_fields_set and getattr(args, k) != v}
    if applied:
        updates.update(applied)
        listed = ", ".join(f"{k}={v}" for k, v in applied.items())
        notes.append(f"rl_algorithm={args.rl_algorithm} sets {listed} (the paper's recipe; set a key to override it).")


def _overlong_buffer(args: Arguments, updates: dict, notes: list[str]) -> None:
    """DAPO's soft overlong penalty starts at max_dec_len - overlong_reward_buffer. PaddleNLP's fixed default
    of 256 would penalise every response when max_dec_len <= 256, so an unset buffer is a fifth of
    max_dec_len (verl's DAPO recipe: 4096 of 20480); a set one must leave room for an unpenalised answer."""
    if not updates.get("enable_overlong_reward_buffer", args.enable_overlong_reward_buffer):
        return
    if "overlong_reward_buffer" in args.model_fields_set:
        if args.overlong_reward_buffer >= args.max_dec_len:
            raise ConfigError(
                f"overlong_reward_buffer={args.overlong_reward_buffer} is not shorter than max_dec_len="
                f"{args.max_dec_len}, so every response would be penalised from its first token; set it to about "
                f"a fifth of max_dec_len ({max(args.max_dec_len // 5, 1)}) or leave it unset.")
        return
    buffer = updates["overlong_reward_buffer"] = max(args.max_dec_len // 5, 1)
    notes.append(f"overlong shaping is on: overlong_reward_buffer={buffer} (a fifth of max_dec_len="
                 f"{args.max_dec_len}); responses up to {args.max_dec_len - buffer} tokens are never penalised.")


def _batch_rules(args: Arguments, world_size: int, updates: dict, notes: list[str]) -> None:
    given = args.model_fields_set
    plan = batch_plan(args, world_size)
    micro = args.per_device_train_batch_size
    for key in ("per_device_logprob_batch_size", "per_device_reward_batch_size", "per_device_value_batch_size"):
        if getattr(args, key) <= 0:
            updates[key] = micro
    if plan.mode == "global":
        updates["global_mini_batch_size"] = plan.mini_batch_prompts
        updates["global_gen_batch_size"] = plan.gen_prompts_per_step
        if args.per_device_rollout_batch_size <= 0:
            updates["per_device_rollout_batch_size"] = plan.prompts_per_rank
        if "gradient_accumulation_steps" in given and args.gradient_accumulation_steps != plan.gradient_accumulation_steps:
            notes.append(f"gradient_accumulation_steps={args.gradient_accumulation_steps} is replaced by "
                         f"{plan.gradient_accumulation_steps}, computed from global_mini_batch_size (as PaddleNLP E5+ does).")
        updates["gradient_accumulation_steps"] = plan.gradient_accumulation_steps
        for key in ("per_device_prompt_batch_size", "per_device_sample_batch_size"):
            if key in given:
                notes.append(f"{key} is ignored because global_batch_size is set (as in PaddleNLP E5+).")
    else:
        if args.per_device_rollout_batch_size <= 0:
            updates["per_device_rollout_batch_size"] = micro
        for key in ("global_mini_batch_size", "global_gen_batch_size"):
            if key in given:
                notes.append(f"{key} is ignored because global_batch_size is not set (per-device batch sizes apply).")
    if args.max_steps > 0 and plan.optimizer_steps_per_rollout != 1:
        notes.append(f"max_steps={args.max_steps} counts rollout steps; each makes "
                     f"{plan.optimizer_steps_per_rollout} optimizer steps (PaddleNLP counted optimizer steps).")


def _eval_rules(args: Arguments, updates: dict) -> None:
    strategy = args.evaluation_strategy
    if strategy != "no":
        updates["do_eval"] = True
    elif args.do_eval:
        strategy = updates["evaluation_strategy"] = "steps"
    if strategy == "steps" and not args.eval_steps:
        updates["eval_steps"] = args.logging_steps
    if args.report_to is None:
        updates["report_to"] = ["visualdl"]
    elif [r.lower() for r in args.report_to] == ["none"]:
        updates["report_to"] = []
    if args.disable_tqdm is None:
        updates["disable_tqdm"] = False


def _eval_batch_cap(args: Arguments, world_size: int, updates: dict, notes: list[str]) -> None:
    """PaddleNLP E7+'s cap on a given per_device_eval_batch_size (global mode): global_batch_size x rollout_n
    x update_iters / its data-parallel ranks. The default (8) and per-device mode (whose E2b-E4 cap tied
    eval to rollout micro-batches, meaningless for ppokit's eval CLI) are left alone."""
    if "per_device_eval_batch_size" not in args.model_fields_set:
        return
    plan = batch_plan(args, world_size)
    if plan.mode != "global":
        return
    cap = args.global_batch_size * args.rollout_n * args.update_iters // plan.data_parallel_size
    if cap >= 1 and args.per_device_eval_batch_size > cap:
        updates["per_device_eval_batch_size"] = cap
        notes.append(f"per_device_eval_batch_size={args.per_device_eval_batch_size} is capped at global_batch_size x "
                     f"rollout_n x update_iters / data-parallel ranks = {args.global_batch_size} x {args.rollout_n} x "
                     f"{args.update_iters} / {plan.data_parallel_size} = {cap} (as PaddleNLP does).")


def _misc_rules(args: Arguments, updates: dict, notes: list[str]) -> None:
    given = args.model_fields_set
    if args.rl_algorithm in NORM_OFF_ALGORITHMS:
        for key in ("normalize_reward", "normalize_advantage"):
            if getattr(args, key):
                notes.append(f"{key} is turned off for rl_algorithm={args.rl_algorithm}: group-relative "
                             "advantages are already normalised (PaddleNLP does the same for grpo).")
            updates[key] = False
    prompt_len = _era_lengths(args, updates, notes)
    if "max_src_len" in given and args.max_src_len != prompt_len:
        notes.append(f"max_src_len={args.max_src_len} is replaced by max_prompt_len={prompt_len} "
                     "(as PaddleNLP's run script does).")
    updates["max_src_len"] = prompt_len
    if args.decay_steps is None and args.max_steps > 0:
        updates["decay_steps"] = args.max_steps
    if args.rollout_tensor_parallel_degree <= 0:
        updates["rollout_tensor_parallel_degree"] = max(args.tensor_parallel_degree, 1)
    if "output_dir" not in given:
        notes.append("output_dir not given: using 'output' (PaddleNLP requires the key).")
    if args.critic_model_name_or_path and not algorithm(args.rl_algorithm).needs_critic:
        notes.append(f"critic_model_name_or_path is not used: rl_algorithm={args.rl_algorithm} has no critic "
                     "(its baseline comes from the group of responses); use rl_algorithm=ppo to train one.")
    if "do_train" in given and not args.do_train:
        notes.append("do_train is false: PaddleNLP would skip training; run_ppo.py trains anyway.")
    if not args.needs_reference:
        kl = "kl_loss_coeff=0 and kl_coeff=0" if args.use_kl_in_reward else "kl_loss_coeff=0"
        notes.append(f"KL to the reference model is off ({kl}): no reference model is needed.")
    if "per_device_train_batch_size" not in given:
        notes.append("per_device_train_batch_size not given: using 1 (PaddleNLP E5+ default; E0-E4 used 8).")


def _era_lengths(args: Arguments, updates: dict, notes: list[str]) -> int:
    """The prompt budget as the file's era meant it. Files that predate max_prompt_len (PaddleNLP E0-E1) had
    max_length as the whole budget (prompt and response together); the length check applies only to what the
    file (or the command line) set. Returns the prompt length in force."""
    given = args.model_fields_set
    prompt_len = args.max_prompt_len
    if "max_prompt_len" in given or prompt_len + args.max_dec_len <= args.max_length:
        return prompt_len
    if args.max_length > args.max_dec_len:
        prompt_len = updates["max_prompt_len"] = args.max_length - args.max_dec_len
        notes.append(f"max_prompt_len not given: using max_length - max_dec_len = {prompt_len} (PaddleNLP's "
                     f"default {args.max_prompt_len} does not fit in max_length={args.max_length}).")
    elif "max_dec_len" not in given and args.max_length >= 2:
        prompt_len = updates["max_prompt_len"] = args.max_length // 2
        updates["max_dec_len"] = args.max_length - prompt_len
        notes.append(f"neither max_prompt_len nor max_dec_len is given: this file's max_length={args.max_length} is "
                     f"the whole budget of prompt and response (as in PaddleNLP's first releases); using "
                     f"max_prompt_len={prompt_len} and max_dec_len={args.max_length - prompt_len}.")
    return prompt_len
