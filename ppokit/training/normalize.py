"""Running reward normalisation (`normalize_reward`), with state for checkpoints."""

from __future__ import annotations

import torch


class RunningNormalizer:
    """Scales rewards by the running std of all rewards seen so far (Welford / Chan merge).

    PaddleNLP normalises rewards by running statistics; like verl/OpenRLHF we divide by the running
    std and subtract the running mean, so the score's sign relative to the average is kept.
    """

    def __init__(self, eps: float = 1e-8):
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.eps = eps

    def update(self, x: torch.Tensor) -> None:
        """Fold a batch x: (B,) into the running mean and variance."""
        n = x.numel()
        if n == 0:
            return
        b_mean = float(x.float().mean())
        b_m2 = float(((x.float() - b_mean) ** 2).sum())
        total = self.count + n
        delta = b_mean - self.mean
        self.mean += delta * n / total
        self.m2 += b_m2 + delta**2 * self.count * n / total
        self.count = total

    @property
    def std(self) -> float:
        return (self.m2 / max(self.count - 1, 1)) ** 0.5 if self.count > 1 else 1.0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Update with x (B,), then return (x - mean) / (std + eps)."""
        self.update(x)
        return (x - self.mean) / (self.std + self.eps)

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict) -> None:
        self.count, self.mean, self.m2 = state["count"], state["mean"], state["m2"]
