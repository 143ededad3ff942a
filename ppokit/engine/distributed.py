"""Process-group setup for one process or many (torchrun / the deepspeed launcher)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(backend: str | None = None) -> DistInfo:
    """Initialise torch.distributed through DeepSpeed, once; return this process's place.

    Under torchrun or the deepspeed launcher the environment (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT) is already set and used as is. A plain `python` run becomes a
    single-process group (rank 0 of 1 on 127.0.0.1 and a free port): without those variables
    DeepSpeed would go looking for MPI. The backend is nccl on CUDA and gloo on CPU unless given.
    Calling it again returns the same answer without re-initialising.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        _single_process_env_defaults()
    use_cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend or ("nccl" if use_cuda else "gloo"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, device)


def _single_process_env_defaults() -> None:
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) > 1:
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in env]
        if missing:
            raise RuntimeError(
                f"WORLD_SIZE={env['WORLD_SIZE']} but {' and '.join(missing)} is not set; start multi-process "
                "runs with `torchrun` or `deepspeed`, which set them."
            )
        env.setdefault("LOCAL_RANK", env["RANK"])
        return
    env.setdefault("RANK", "0")
    env.setdefault("WORLD_SIZE", "1")
    env.setdefault("LOCAL_RANK", "0")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    # A port ppokit picked in a parent process (e.g. a notebook kernel started from a session's process)
    # is still held there: a child must pick its own.
    inherited = env.get("MASTER_PORT") is not None and env.get("MASTER_PORT") == env.get("PPOKIT_SINGLE_PROCESS_PORT")
    if "MASTER_PORT" not in env or inherited:
        env["MASTER_PORT"] = str(free_port())
        env["PPOKIT_SINGLE_PROCESS_PORT"] = env["MASTER_PORT"]
