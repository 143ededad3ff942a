"""KL estimators (k1, k2, k3, abs), KL-in-reward shaping and the KL coefficient controllers.

With d = logp - ref_logp (log pi(y_t) - log pi_ref(y_t) of the sampled token):
  k1 = d;  abs = |d|;  k2 = d^2 / 2;  k3 = exp(-d) + d - 1  (d clamped to +-20 before exp,
  result clamped to [0, 10]: k3 >= 0). verl's names are accepted: kl -> k1, mse -> k2, low_var_kl -> k3.
``KL_ESTIMATORS`` holds the four canonical names and the three aliases; ``KL_ALIASES`` maps an
alias to its canonical name.
"""

from __future__ import annotations

import torch

from .masked import as_float_mask

__all__ = [
    "kl_penalty",
    "apply_kl_penalty",
    "canonical_kl_name",
    "FixedKL",
    "AdaptiveKL",
    "make_kl_controller",
    "KL_ESTIMATORS",
    "KL_ALIASES",
    "KL_CONTROLLERS",
]


def _k1(d: torch.Tensor) -> torch.Tensor:
    """k1 = d. d: (B, T) -> (B, T)."""
    return d


def _abs(d: torch.Tensor) -> torch.Tensor:
    """abs = |d|. d: (B, T) -> (B, T)."""
    return d.abs()


def _k2(d: torch.Tensor) -> torch.Tensor:
    """k2 = d^2 / 2. d: (B, T) -> (B, T)."""
    return 0.5 * d.square()


def _k3(d: torch.Tensor) -> torch.Tensor:
    """k3 = exp(-d) + d - 1 >= 0 (Schulman's low-variance estimator), d clamped to +-20, result to <= 10.

    d: (B, T) -> (B, T). Computed as expm1(-d) + d, which is accurate near d = 0; the lower
    clamp is at 0 rather than -10 (k3 is never negative: the clamp only removes float rounding).
    """
    d = d.clamp(-20.0, 20.0)
    return (torch.expm1(-d) + d).clamp(0.0, 10.0)


KL_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
_CANONICAL = {"k1": _k1, "k2": _k2, "k3": _k3, "abs": _abs}
KL_ESTIMATORS = {**_CANONICAL, **{alias: _CANONICAL[name] for alias, name in KL_ALIASES.items()}}


def canonical_kl_name(estimator: str) -> str:
    """Map an estimator name or verl alias to k1 | k2 | k3 | abs; raise ValueError if unknown."""
    name = KL_ALIASES.get(estimator, estimator)
    if name not in _CANONICAL:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose from {sorted(KL_ESTIMATORS)}")
    return name


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference.

    logp: (B, T), ref_logp: (B, T) -> (B, T), not masked and not reduced.
    Differentiable in ``logp`` (use it as a KL loss); ``ref_logp`` is treated as a constant.
    """
    fn = _CANONICAL[canonical_kl_name(estimator)]
    return fn(logp - ref_logp.detach())


def apply_kl_penalty(
    token_rewards: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    estimator: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Put the KL penalty into the rewards (PPO's kl_coeff): r'_t = r_t - beta KL_t on valid tokens.

    token_rewards, logp, ref_logp, mask: (B, T) -> (new_token_rewards (B, T), kl (B, T)).
    ``kl`` is the per-token estimate, 0 on masked tokens; both outputs are detached (rewards are
    data). Masked tokens keep their reward unchanged.
    """
    with torch.no_grad():
        kl = kl_penalty(logp.detach(), ref_logp, estimator)
        m = as_float_mask(mask, kl)
        kl = torch.where(m.bool(), kl, torch.zeros_like(kl))
        return token_rewards - float(beta) * kl.to(token_rewards.dtype), kl


class FixedKL:
    """Constant KL coefficient: ``.value`` never changes; ``update`` is a no-op."""

    def __init__(self, value: float):
        """value: the coefficient beta (>= 0)."""
        if value < 0:
            raise ValueError(f"KL coefficient must be >= 0, got {value}")
        self.value = float(value)

    def update(self, observed_kl: float, n_steps: int) -> float:
        """Ignore the observation; return the (unchanged) coefficient."""
        return self.value

    def state_dict(self) -> dict:
        """{"value": beta}."""
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        """Restore beta from ``state_dict()``'s output."""
        self.value = float(state["value"])


class AdaptiveKL:
    """Adaptive KL coefficient (Ziegler et al. 2019), as in verl/TRL.

    update: e = clip(KL / target - 1, -0.2, 0.2); beta <- beta (1 + e n_steps / horizon),
    where KL is the observed mean KL of the batch and n_steps the number of samples (verl passes
    the batch size) it was measured on.
    """

    def __init__(self, init: float, target: float, horizon: float):
        """init: starting beta (>= 0); target: desired KL (> 0); horizon: adaptation horizon (> 0)."""
        if init < 0 or target <= 0 or horizon <= 0:
            raise ValueError(f"AdaptiveKL needs init >= 0, target > 0, horizon > 0; got {init}, {target}, {horizon}")
        self.value = float(init)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, observed_kl: float, n_steps: int) -> float:
        """Move beta toward keeping the observed KL at the target; return the new beta.

        observed_kl: float or 0-d tensor; n_steps: int.
        """
        error = min(max(float(observed_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
        return self.value

    def state_dict(self) -> dict:
        """{"value": beta, "target": ..., "horizon": ...}."""
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: dict) -> None:
        """Restore beta (target and horizon stay as constructed: they come from the config)."""
        self.value = float(state["value"])


KL_CONTROLLERS = {"fixed": FixedKL, "adaptive": AdaptiveKL}


def make_kl_controller(kind: str, init: float, target: float | None = None, horizon: float | None = None):
    """Build a controller by config name: ``fixed`` (uses init) or ``adaptive`` (init, target, horizon)."""
    if kind == "fixed":
        return FixedKL(init)
    if kind == "adaptive":
        if target is None or horizon is None:
            raise ValueError("an adaptive KL controller needs target_kl and kl_horizon")
        return AdaptiveKL(init, target, horizon)
    raise ValueError(f"unknown KL controller {kind!r}; choose from {sorted(KL_CONTROLLERS)}")
