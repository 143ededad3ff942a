"""Rewards: in-process reward functions, the reward model, and the HTTP reward server and its client.

    fns = build_reward_functions(args, records)                   # list[NamedReward]
    total, per_fn = compute_rewards(fns, prompts, responses, records)
    total, per_fn = score_responses(fns, prompts, answers, records, score_fields, rollout_rewards)  # the one rule
    keep, n_skipped = skipped_groups(total, rollout_n)            # only under reward_on_error: skip_group

The server and client live in `ppokit.rewards.server` / `ppokit.rewards.client` (imported on demand).

May import: torch, httpx/fastapi, and `ppokit.tasks` (verifiers).
"""

from ppokit.rewards.build import build_reward_functions
from ppokit.rewards.detect import detect_task
from ppokit.rewards.errors import RewardError, RewardServerError
from ppokit.rewards.functions import (
    NamedReward,
    RewardFn,
    compute_rewards,
    load_reward_function,
    make_rule_reward,
    parse_reward_functions,
    record_fields,
    skipped_groups,
)
from ppokit.rewards.scoring import score_responses


def __getattr__(name):
    # The client pulls in httpx; import it only when asked for.
    if name == "RewardServerClient":
        from ppokit.rewards.client import RewardServerClient

        return RewardServerClient
    raise AttributeError(f"module 'ppokit.rewards' has no attribute {name!r}")


__all__ = [
    "NamedReward",
    "RewardError",
    "RewardFn",
    "RewardServerClient",
    "RewardServerError",
    "build_reward_functions",
    "compute_rewards",
    "detect_task",
    "load_reward_function",
    "make_rule_reward",
    "parse_reward_functions",
    "record_fields",
    "score_responses",
    "skipped_groups",
]
