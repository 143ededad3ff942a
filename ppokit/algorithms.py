"""The algorithm table: what each `rl_algorithm` is, defined once, one row per algorithm.

A row holds the estimator (a key of `algos.ADVANTAGE_ESTIMATORS`), what the trainer must build (groups, KL in the
reward, a critic), whether reward/advantage normalisation is turned off (group-relative advantages are normalised
already), the paper's preset keys, the label reports print and verl's `algorithm.adv_estimator` name. `args` (the
accepted names and their choices, presets, normalisation, verl translation), `training`, `algos` and the reports
read this table; nothing else lists algorithm names. The policy-loss table below is the same for `policy_loss`.
Adding an estimator or a policy loss is one decorated function (`@estimator` / `@policy_loss` in `algos`) and one
row here. A leaf below every room: plain data, no imports (so `args` stays free of torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

NO_PRESETS: Mapping[str, Any] = MappingProxyType({})


class Algorithm(NamedTuple):
    """estimator: key of `ADVANTAGE_ESTIMATORS`; needs_groups: advantages compare the rollout_n
    responses of one prompt; kl_in_reward: `kl_coeff` x KL goes into the token rewards (PaddleNLP's
    use_kl_in_reward); needs_critic: a value model is trained (GAE); normalize_off: normalize_reward and
    normalize_advantage are turned off (PaddleNLP does so for grpo); presets: the paper's recipe, keys set when
    the user did not set them; label: the name reports print; verl_name: verl's algorithm.adv_estimator value
    that selects it (None: verl has none)."""

    estimator: str
    needs_groups: bool = False
    kl_in_reward: bool = False
    needs_critic: bool = False
    normalize_off: bool = False
    presets: Mapping[str, Any] = NO_PRESETS
    label: str = ""
    verl_name: str | None = None


ALGORITHMS: dict[str, Algorithm] = {
    "ppo": Algorithm("gae", kl_in_reward=True, needs_critic=True, label="PPO (actor + critic)", verl_name="gae"),
    "grpo": Algorithm("grpo", needs_groups=True, normalize_off=True, label="GRPO", verl_name="grpo"),
    "reinforce_plus_plus": Algorithm("reinforce_plus_plus", kl_in_reward=True, label="REINFORCE++",
                                     verl_name="reinforce_plus_plus"),
    "rloo": Algorithm("rloo", needs_groups=True, normalize_off=True, label="RLOO", verl_name="rloo"),
    # Dr.GRPO (Liu et al. 2025): no std normalisation, a constant length normaliser.
    "drgrpo": Algorithm("drgrpo", needs_groups=True, normalize_off=True, label="Dr.GRPO", verl_name="drgrpo",
                        presets=MappingProxyType({"norm_adv_by_std_in_grpo": False,
                                                  "loss_agg_mode": "seq-mean-token-sum-norm"})),
    # DAPO (Yu et al. 2025): GRPO's estimator; clip-higher, token-level loss, dynamic sampling, overlong shaping.
    "dapo": Algorithm("grpo", needs_groups=True, normalize_off=True, label="DAPO", verl_name="dapo",
                      presets=MappingProxyType({"clip_range_ratio_low": 0.2, "clip_range_ratio_high": 0.28,
                                                "loss_agg_mode": "token-mean", "dynamic_sampling": True,
                                                "enable_overlong_reward_buffer": True})),
    "reinforce_plus_plus_baseline": Algorithm("reinforce_plus_plus_baseline", needs_groups=True, kl_in_reward=True,
                                              label="reinforce_plus_plus_baseline",
                                              verl_name="reinforce_plus_plus_baseline"),
    # PaddleNLP's late VAPO (Yue et al. 2025): PPO with value pretraining, decoupled GAE (critic lambda 1),
    # length-adaptive actor lambda (alpha 0.05), clip-higher, token-level loss, positive-example LM loss (mu 0.1).
    "vapo": Algorithm("vapo", kl_in_reward=True, needs_critic=True, label="vapo",
                      presets=MappingProxyType({"critic_warmup_steps": 50, "lam_critic": 1.0,
                                                "length_adaptive_alpha": 0.05, "clip_range_ratio_low": 0.2,
                                                "clip_range_ratio_high": 0.28, "loss_agg_mode": "token-mean",
                                                "positive_lm_coeff": 0.1})),
}

ALGORITHM_NAMES = tuple(ALGORITHMS)
GROUP_ALGORITHMS = frozenset(name for name, a in ALGORITHMS.items() if a.needs_groups)
KL_IN_REWARD_ALGORITHMS = frozenset(name for name, a in ALGORITHMS.items() if a.kl_in_reward)
NORM_OFF_ALGORITHMS = frozenset(name for name, a in ALGORITHMS.items() if a.normalize_off)
VERL_ESTIMATORS = {a.verl_name: name for name, a in ALGORITHMS.items() if a.verl_name}  # verl value -> rl_algorithm

# policy_loss: name -> what it is (the function is `@policy_loss(name)` in algos/policy_loss.py)
POLICY_LOSS_TABLE: dict[str, str] = {
    "vanilla": "PPO's clipped surrogate (dual clip with clip_ratio_c)",
    "gspo": "GSPO: the sequence-mean log-ratio, clipped per sequence",
    "cispo": "CISPO: -sg[clip(ratio)] x advantage x log-prob",
}
POLICY_LOSS_NAMES = tuple(POLICY_LOSS_TABLE)


def algorithm(name: str) -> Algorithm:
    """The table row of `name`, or a ValueError listing the known names."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown rl_algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]
