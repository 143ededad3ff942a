"""Running reward normalisation (`normalize_reward`), with state for checkpoints."""

from __future__ import annotations

import torch

from ppokit.engine import all_reduce_sum


def batch_moments(x: torch.Tensor) -> tuple[float, float, float]:
    """(count, mean, sum of squared deviations) of x (B,) over all data-parallel ranks."""
    x = x.detach().double().flatten()
    # sums, not gathers: ranks may hold different numbers of rewards
    n, total, total_sq = all_reduce_sum(float(x.numel()), float(x.sum()), float((x * x).sum()))
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = total / n
    return n, mean, max(total_sq - n * mean * mean, 0.0)


class RunningNormalizer:
    """(x - running mean) / running std over every reward seen so far, on all ranks (Chan's merge).

    As PaddleNLP's `compute_reward_normalization`: the statistics are updated with the batch first,
    then the batch is normalised with them; the sign relative to the running average is kept.
    The std is the unbiased (n - 1) one; with fewer than two rewards seen it is 1.
    """

    def __init__(self, eps: float = 1e-8):
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.eps = eps

    def update(self, x: torch.Tensor) -> None:
        """Fold a batch x: (B,) (all ranks' batches together) into the running mean and variance."""
        n, b_mean, b_m2 = batch_moments(x)
        if n == 0:
            return
        total = self.count + n
        delta = b_mean - self.mean
        self.mean += delta * n / total
        self.m2 += b_m2 + delta**2 * self.count * n / total
        self.count = int(total)

    @property
    def std(self) -> float:
        return (self.m2 / (self.count - 1)) ** 0.5 if self.count > 1 else 1.0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Update with x (B,), then return (x - mean) / (std + eps) in x's dtype."""
        self.update(x)
        return ((x.double() - self.mean) / (self.std + self.eps)).to(x.dtype)

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean, "m2": self.m2}

    def load_state_dict(self, state: dict) -> None:
        self.count, self.mean, self.m2 = state["count"], state["mean"], state["m2"]
