"""DeepSpeed: process group setup (single process too), ZeRO/offload config, engines, LR schedules."""

from ppokit.engine.config import deepspeed_config, zero_settings, zero_stage_from
from ppokit.engine.distributed import DistInfo, free_port, init_distributed
from ppokit.engine.schedule import make_lr_lambda, make_lr_scheduler, warmup_steps_for
from ppokit.engine.training import build_engine, current_lr, micro_batch_backward, unwrap

__all__ = [
    "DistInfo",
    "build_engine",
    "current_lr",
    "deepspeed_config",
    "free_port",
    "init_distributed",
    "make_lr_lambda",
    "make_lr_scheduler",
    "micro_batch_backward",
    "unwrap",
    "warmup_steps_for",
    "zero_settings",
    "zero_stage_from",
]
