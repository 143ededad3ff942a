"""The actor's and the critic's DeepSpeed engines from the arguments: the one place PaddleNLP's keys
become a `deepspeed_config` and an LR schedule (the config itself is `ppokit.engine`'s).

The critic has its own optimizer and schedule: every `critic_*` key that is set replaces the actor's
key of the same name without the prefix (learning_rate, min_learning_rate, lr_scheduler_type,
warmup_ratio, weight_decay, decay_steps, recompute), as PaddleNLP copies them onto the critic's args.
The schedules themselves (how many steps, warmup, decay) come from the run plan (`ppokit.args.run_plan`).
"""

from __future__ import annotations

import random

import numpy as np
import torch

from ppokit.args.run_plan import option
from ppokit.engine import build_engine, deepspeed_config, zero_settings
from ppokit.models.loading import dtype_for


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def choose_device(args, dist_info) -> torch.device:
    """`device` key (ppokit) or the launcher's local device: cuda when present, else cpu."""
    if args.device:
        return torch.device(args.device)
    if torch.cuda.is_available():
        return torch.device("cuda", dist_info.local_rank)
    return torch.device("cpu")


def zero_options(args) -> dict:
    """`deepspeed_config`'s zero_stage and offload_optimizer from PaddleNLP's keys: the stage from
    `sharding`; optimizer offload when `offload_level` names "optimizer", `sharding` has an "offload"
    word, or `offload_optim` is true."""
    stage, offload = zero_settings(args.sharding, args.offload_level)
    return {"zero_stage": stage, "offload_optimizer": offload or bool(getattr(args, "offload_optim", False))}


def train_engine(model, args, run, device, *, critic: bool = False):
    """`model` in a DeepSpeed engine with the actor's (or the critic's) optimizer, ZeRO stage and the LR schedule
    of the run plan `run` (`ppokit.args.RunPlan`)."""
    schedule = run.critic_schedule if critic else run.actor_schedule
    return build_engine(model, engine_config(args, run.batch, device, critic=critic), schedule.spec())


def zero3_config(args, plan, device, *, critic: bool = False) -> dict | None:
    """The engine's DeepSpeed config under ZeRO stage 3 (to load the model partitioned: `models.zero3_loading`),
    else None."""
    return engine_config(args, plan, device, critic=critic) if zero_options(args)["zero_stage"] == 3 else None


def engine_config(args, plan, device, *, critic: bool = False) -> dict:
    """The DeepSpeed config of the actor's (or the critic's) engine."""
    return deepspeed_config(
        **zero_options(args),  # sharding stage; offload_level / offload_optim / "stageN offload"
        micro_batch_size=plan.micro_batch_size, grad_accum=plan.gradient_accumulation_steps,
        world_size=plan.world_size, lr=option(args, "learning_rate", critic), betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon, weight_decay=option(args, "weight_decay", critic), max_grad_norm=args.max_grad_norm,
        fp16=args.fp16, compute_dtype=dtype_for(args.bf16, args.fp16, device)[1], device=device,
    )
