"""The engine room: DeepSpeed and torch.distributed, and nothing else of ppokit's.

Owns: the process group (single process too) and the rank helpers every room uses (`rank`,
`world_size`, `is_distributed`, `all_reduce_sum`, `collective_device`, `barrier`); the one DeepSpeed
config (`deepspeed_config`, ZeRO/offload from PaddleNLP's `sharding` words via `zero_settings`);
engines with PaddleNLP's LR schedules (`build_engine`); and the one backward/step contract with its
finite-loss check (`backward_and_step`, `micro_batch_backward`).
May import: torch, deepspeed. No other ppokit room (every room above may import this one).
"""

from ppokit.engine.config import deepspeed_config, zero_settings
from ppokit.engine.distributed import (
    DistInfo,
    all_reduce_sum,
    barrier,
    collective_device,
    default_group,
    exit_launched_process,
    free_port,
    init_distributed,
    is_distributed,
    rank,
    world_size,
)
from ppokit.engine.engines import backward_and_step, build_engine, current_lr, micro_batch_backward
from ppokit.engine.schedule import make_lr_lambda

__all__ = [
    "DistInfo",
    "all_reduce_sum",
    "backward_and_step",
    "barrier",
    "build_engine",
    "collective_device",
    "current_lr",
    "deepspeed_config",
    "default_group",
    "free_port",
    "init_distributed",
    "is_distributed",
    "exit_launched_process",
    "make_lr_lambda",
    "micro_batch_backward",
    "rank",
    "world_size",
    "zero_settings",
]
