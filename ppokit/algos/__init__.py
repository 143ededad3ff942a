"""Pure tensor math of PPO/GRPO: advantages, policy and value losses, KL, loss reduction, log-probs.

Only torch (and the algorithm table, `ppokit.algorithms`, plain data) is imported here: no config
objects, no model, no I/O. Shapes: B sequences, T
response positions, V vocabulary; ``mask`` (B, T) marks valid response tokens. The registries
map config names to functions so the trainer selects them by name.

Owns: every formula of the trainer (estimators, policy/value losses, KL and its controllers, loss reduction,
whitening, log-probs) and the registries the trainer dispatches through.
May import: torch and the algorithm table `ppokit.algorithms`; no other ppokit room.
"""

from ppokit.algorithms import ALGORITHMS, Algorithm, algorithm

from . import advantages, kl, lm_loss, logprobs, masked, policy_loss, reduce, rollout_correction, value_loss
from .advantages import ADVANTAGE_ESTIMATORS, compute_advantages
from .kl import (
    KL_ALIASES,
    KL_CONTROLLERS,
    KL_ESTIMATORS,
    AdaptiveKL,
    FixedKL,
    apply_kl_penalty,
    canonical_kl_name,
    kl_penalty,
    make_kl_controller,
)
from .lm_loss import AUX_LOSSES
from .logprobs import entropy_from_logits, token_logprobs
from .masked import masked_mean, masked_sum, masked_var, masked_whiten
from .policy_loss import POLICY_LOSSES
from .reduce import REDUCTIONS, global_denominators, reduce_loss
from .rollout_correction import IS_LEVELS, logprob_mismatch, truncated_is_weights
from .value_loss import VALUE_LOSSES

__all__ = [
    "advantages",
    "kl",
    "lm_loss",
    "logprobs",
    "masked",
    "policy_loss",
    "reduce",
    "rollout_correction",
    "value_loss",
    "ADVANTAGE_ESTIMATORS",
    "AUX_LOSSES",
    "ALGORITHMS",
    "Algorithm",
    "algorithm",
    "POLICY_LOSSES",
    "VALUE_LOSSES",
    "KL_ESTIMATORS",
    "KL_ALIASES",
    "KL_CONTROLLERS",
    "REDUCTIONS",
    "IS_LEVELS",
    "truncated_is_weights",
    "logprob_mismatch",
    "compute_advantages",
    "kl_penalty",
    "apply_kl_penalty",
    "canonical_kl_name",
    "FixedKL",
    "AdaptiveKL",
    "make_kl_controller",
    "reduce_loss",
    "global_denominators",
    "token_logprobs",
    "entropy_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]
