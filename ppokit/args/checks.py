"""Consistency checks that no single field can make: refused with a sentence the user can act on."""

from __future__ import annotations

import json
from pathlib import Path

from .arguments import Arguments
from .errors import ConfigError


def consistency_errors(args: Arguments) -> list[str]:
    """Every inconsistency of ``args`` (after the post-init rules), as sentences."""
    errors = []
    if args.group_algorithm and args.rollout_n < 2:
        errors.append(f"rl_algorithm={args.rl_algorithm} compares the responses to one prompt, so it needs "
                      f"rollout_n >= 2 (got {args.rollout_n}); set rollout_n to e.g. 8.")
    if args.clip_ratio_c is not None and args.clip_ratio_c <= 1:
        errors.append(f"clip_ratio_c={args.clip_ratio_c} must be greater than 1 (dual clip bounds the loss "
                      "at c x |A|); use e.g. 3.0, or null to turn dual clip off.")
    if args.use_rm_server and not args.reward_server:
        errors.append("use_rm_server is true but reward_server is not set; give the server's URL, e.g. "
                      "reward_server=http://127.0.0.1:8731.")
    if args.bf16 and args.fp16:
        errors.append("bf16 and fp16 are both true; choose one precision.")
    if args.fp16_opt_level == "O2" and not (args.bf16 or args.fp16):
        errors.append("fp16_opt_level=O2 needs bf16 or fp16 true (PaddleNLP refuses it too); set one, or use O1.")
    if args.sharding and not _valid_sharding(args.sharding):
        errors.append(f"sharding='{args.sharding}' is not understood; use '', stage1, stage2 or stage3, "
                      "optionally followed by 'offload'.")
    errors.extend(_partial_rollout_errors(args))
    return errors


def _partial_rollout_errors(args: Arguments) -> list[str]:
    """partial_rollout: switch acts only where a generation overlaps an update: the threaded producer."""
    if args.partial_rollout != "switch":
        return []
    if args.staleness_threshold == 0 or args.async_producer != "thread":
        return [f"partial_rollout=switch needs rollouts that run beside the update (staleness_threshold >= 1 and "
                f"async_producer: thread; got staleness_threshold={args.staleness_threshold}, async_producer="
                f"{args.async_producer}): otherwise no weights arrive mid-generation; set those, or partial_rollout: "
                "finish."]
    if args.multi_turn or args.dynamic_sampling:
        return ["partial_rollout=switch records per-token policy versions for a rollout of one generate call only "
                f"(single-turn, no dynamic_sampling; got multi_turn={args.multi_turn}, dynamic_sampling="
                f"{args.dynamic_sampling}); set partial_rollout: finish."]
    return []


def _valid_sharding(value: str) -> bool:
    words = value.split()
    stages = [w for w in words if w in ("stage1", "stage2", "stage3")]
    return len(stages) == 1 and all(w in ("stage1", "stage2", "stage3", "offload") for w in words)


def check_lengths(args: Arguments, model_max_positions: int | None) -> None:
    """Refuse lengths that cannot fit once the model is known: max_prompt_len + max_dec_len must fit in
    max_length, and max_length in the model's position limit (``model_max_positions``; None = unknown)."""
    total = args.max_prompt_len + args.max_dec_len
    if total > args.max_length:
        raise ConfigError(
            f"max_prompt_len + max_dec_len = {args.max_prompt_len} + {args.max_dec_len} = {total} exceeds "
            f"max_length={args.max_length}; raise max_length to at least {total} or shorten the prompt "
            "or response limit.")
    if model_max_positions is not None and args.max_length > model_max_positions:
        raise ConfigError(
            f"max_length={args.max_length} exceeds the model's {model_max_positions} positions "
            f"(max_position_embeddings); set max_length <= {model_max_positions}.")


def local_model_positions(name_or_path: str | None) -> int | None:
    """max_position_embeddings from a local model folder's config.json, read without loading the model
    (None for no model, an alias, a .gguf file or a folder without one)."""
    if not name_or_path:
        return None
    config = Path(name_or_path) / "config.json"
    try:
        value = json.loads(config.read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def startup_checks(args: Arguments) -> None:
    """What the run checks at start-up that needs more than the arguments, done without loading a model, so
    `--print_config` refuses what the run would refuse."""
    check_lengths(args, local_model_positions(args.actor_model_name_or_path))
