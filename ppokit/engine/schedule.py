"""Learning-rate schedules with PaddleNLP's semantics, as multipliers for `torch.optim.lr_scheduler.LambdaLR`.

`step` counts optimizer steps from 0 (the multiplier at step k is used by the (k+1)-th update).

Stock schedules (PaddleNLP's `get_scheduler`, the same as Hugging Face's), with warmup w and total T:
- constant: 1; constant_with_warmup: k/w during warmup, then 1;
- linear: k/w, then (T - k)/(T - w) down to 0;
- cosine: k/w, then 0.5·(1 + cos(pi·2·num_cycles·p)) with p = (k - w)/(T - w), num_cycles = 0.5;
- polynomial: k/w, then ((lr - lr_end)·(1 - p)^power + lr_end)/lr, and lr_end/lr after T.

With `min_lr` set and kind linear or cosine, PaddleNLP's RL scheduler is used instead
(`LinearAnnealingWithWarmupDecay` / `CosineAnnealingWithWarmupDecay`): lr·k/w for k <= w, then from lr
down to min_lr over `decay_steps` (default T), min_lr after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

KINDS = ("linear", "cosine", "constant", "constant_with_warmup", "polynomial")


def make_lr_lambda(
    kind: str,
    total_steps: int,
    warmup_steps: int,
    lr: float,
    min_lr: float | None = None,
    *,
    decay_steps: int | None = None,
    lr_end: float = 1e-7,
    power: float = 1.0,
    num_cycles: float = 0.5,
) -> Callable[[int], float]:
    """A pure function step -> multiplier of `lr` for the schedule `kind` (see the module docstring)."""
    if kind not in KINDS:
        raise ValueError(f"lr_scheduler_type {kind!r} is not supported; choose one of {', '.join(KINDS)}.")
    if total_steps < 1:
        raise ValueError(f"The learning-rate schedule needs at least one optimizer step, got total_steps={total_steps}.")
    warmup = max(0, int(warmup_steps))
    if min_lr is not None and kind in ("linear", "cosine"):
        return _annealing(kind, lr, min_lr, warmup, decay_steps or total_steps)

    def warm(step: int) -> float | None:
        return step / max(1, warmup) if step < warmup else None

    def constant(step: int) -> float:
        return 1.0

    def constant_with_warmup(step: int) -> float:
        w = warm(step)
        return 1.0 if w is None else w

    def linear(step: int) -> float:
        w = warm(step)
        return w if w is not None else max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    def cosine(step: int) -> float:
        w = warm(step)
        if w is not None:
            return w
        progress = (step - warmup) / max(1, total_steps - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * num_cycles * 2.0 * progress)))

    def polynomial(step: int) -> float:
        w = warm(step)
        if w is not None:
            return w
        if lr <= 0:
            return 0.0
        if step > total_steps:
            return lr_end / lr
        remaining = 1 - (step - warmup) / max(1, total_steps - warmup)
        return ((lr - lr_end) * remaining**power + lr_end) / lr

    return {
        "constant": constant,
        "constant_with_warmup": constant_with_warmup,
        "linear": linear,
        "cosine": cosine,
        "polynomial": polynomial,
    }[kind]


def _annealing(kind: str, lr: float, min_lr: float, warmup: int, decay_steps: int) -> Callable[[int], float]:
    def absolute(step: int) -> float:
        if warmup > 0 and step <= warmup:
            return lr * step / warmup
        if step > decay_steps:
            return min_lr
        ratio = (step - warmup) / max(1, decay_steps - warmup)
        ratio = min(1.0, ratio)
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0) if kind == "cosine" else 1.0 - ratio
        return min_lr + coeff * (lr - min_lr)

    def multiplier(step: int) -> float:
        return absolute(step) / lr if lr > 0 else 0.0

    return multiplier


def retarget(scheduler, spec: dict) -> None:
    """Make a `LambdaLR` follow the schedule `spec` (keyword arguments of `make_lr_lambda`, `lr` included) from its
    current step on; the optimizer's param groups take the new value for the next update."""
    fn = make_lr_lambda(**spec)
    scheduler.lr_lambdas = [fn] * len(scheduler.optimizer.param_groups)
    for group, base in zip(scheduler.optimizer.param_groups, scheduler.base_lrs):
        group["lr"] = base * fn(scheduler.last_epoch)
