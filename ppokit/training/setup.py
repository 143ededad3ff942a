"""Building what a Session holds: process group, models, DeepSpeed engine, rollout engine, data, rewards.

Each builder takes the resolved `Arguments` and returns plain objects; the Session only wires them.
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass

import numpy as np
import torch

logger = logging.getLogger("ppokit")


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


@dataclass
class Policy:
    """The actor side: tokenizer, trainable model (inside a DeepSpeed engine), reference, precision."""

    tokenizer: object
    engine: object  # deepspeed engine; engine.module is the (peft-wrapped) causal LM
    reference: object | None  # callable model (or adapter-disabled view) for reference log-probs
    compute_dtype: torch.dtype | None
    device: torch.device
    model_path: str | None


def choose_device(args, dist_info) -> torch.device:
    """`device` key (ppokit) or the launcher's local device: cuda when present, else cpu."""
    if args.device:
        return torch.device(args.device)
    if torch.cuda.is_available():
        return torch.device("cuda", dist_info.local_rank)
    return torch.device("cpu")


def lr_schedule_spec(args, total_optimizer_steps: int, critic: bool = False) -> dict:
    """The LR schedule parameters for the actor or (with PaddleNLP's critic_* overrides) the critic."""
    def pick(key):
        own = getattr(args, f"critic_{key}", None) if critic else None
        return own if own is not None else getattr(args, key)

    warmup = args.warmup_steps if getattr(args, "warmup_steps", 0) else int(pick("warmup_ratio") * total_optimizer_steps)
    return dict(
        kind=pick("lr_scheduler_type"),
        total_steps=max(total_optimizer_steps, 1),
        warmup_steps=warmup,
        lr=pick("learning_rate"),
        min_lr=pick("min_learning_rate"),
    )


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")
