"""The algorithm table: what each `rl_algorithm` needs, defined once.

`args` (the accepted names; group algorithms need rollout_n >= 2), `training` (which estimator to
call, whether KL goes into the reward, whether a critic is built) and `algos` (whose estimator
registry the `estimator` names key) all read this table; nothing else lists algorithm names.
A leaf below every room: plain data, no imports (so `args` stays free of torch).
"""

from __future__ import annotations

from typing import NamedTuple


class Algorithm(NamedTuple):
    """estimator: key of `ADVANTAGE_ESTIMATORS`; needs_groups: advantages compare the rollout_n
    responses of one prompt; kl_in_reward: `kl_coeff` x KL goes into the token rewards (PaddleNLP's
    use_kl_in_reward); needs_critic: a value model is trained (GAE)."""

    estimator: str
    needs_groups: bool = False
    kl_in_reward: bool = False
    needs_critic: bool = False


ALGORITHMS: dict[str, Algorithm] = {
    "ppo": Algorithm("gae", kl_in_reward=True, needs_critic=True),
    "grpo": Algorithm("grpo", needs_groups=True),
    "reinforce_plus_plus": Algorithm("reinforce_plus_plus", kl_in_reward=True),
    "rloo": Algorithm("rloo", needs_groups=True),
    "drgrpo": Algorithm("drgrpo", needs_groups=True),
    "dapo": Algorithm("grpo", needs_groups=True),  # GRPO's estimator; DAPO's other parts are config keys
    "reinforce_plus_plus_baseline": Algorithm("reinforce_plus_plus_baseline", needs_groups=True, kl_in_reward=True),
    # PaddleNLP's late VAPO: PPO with decoupled, length-adaptive GAE; its other parts are config keys (preset).
    "vapo": Algorithm("vapo", kl_in_reward=True, needs_critic=True),
}

ALGORITHM_NAMES = tuple(ALGORITHMS)
GROUP_ALGORITHMS = frozenset(name for name, a in ALGORITHMS.items() if a.needs_groups)
KL_IN_REWARD_ALGORITHMS = frozenset(name for name, a in ALGORITHMS.items() if a.kl_in_reward)


def algorithm(name: str) -> Algorithm:
    """The table row of `name`, or a ValueError listing the known names."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown rl_algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]
