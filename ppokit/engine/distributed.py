"""Process-group setup for one process or many (torchrun / the deepspeed launcher)."""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass

import torch

from ppokit.errors import PpokitError

GLOO_SETTLE_S = 0.2  # at exit, time for gloo's threads to take the GIL and drop the work objects they hold


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def is_distributed() -> bool:
    """True once torch.distributed has a process group (a single-process one counts)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank (0 without a process group)."""
    import torch.distributed as dist

    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """Number of processes in the default group (1 without a process group)."""
    import torch.distributed as dist

    return dist.get_world_size() if is_distributed() else 1


def default_group():
    """The default process group (`torch.distributed.group.WORLD`), or None without one."""
    import torch.distributed as dist

    return dist.group.WORLD if is_distributed() else None


def collective_device() -> torch.device:
    """Where tensors for collectives must live: the current GPU under NCCL, else the CPU (gloo)."""
    import torch.distributed as dist

    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(*values: float) -> list[float]:
    """The values summed over all ranks in float64 (themselves with one process)."""
    import torch.distributed as dist

    totals = torch.tensor(values, dtype=torch.float64)
    if world_size() > 1:
        totals = totals.to(collective_device())  # NCCL reduces only GPU tensors
        dist.all_reduce(totals)
    return totals.tolist()


def barrier() -> None:
    """Wait for every rank (nothing to wait for with one process)."""
    import torch.distributed as dist

    if world_size() > 1:
        dist.barrier()


def exit_launched_process(code: int = 0) -> None:
    """End a launched process (run_ppo.py and friends, never a notebook): with several ranks, wait for all,
    leave the process group, flush, and exit without interpreter finalization, where objects still held by
    gloo's threads (async work, tensors) get destroyed and can abort a rank after a finished run
    ("terminate called without an active exception", exit -6). One process simply exits."""
    import torch.distributed as dist

    if is_distributed():
        barrier()
        dist.destroy_process_group()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def leave_process_group_at_exit() -> None:
    """At the exit of a script that ended without `exit_launched_process` (a user's own script, a notebook run as
    a script, a Session never closed): leave the process group ppokit started, then let gloo's threads finish.
    After a collective returns, the gloo thread that ran it still holds its work object and destroys it a moment
    later, which releases tensors that Python made and so needs the GIL. If the interpreter is finalizing by then,
    that thread is ended inside C++ and the rank aborts after finishing its work ("terminate called without an
    active exception", exit -6: about 1 in 8 two-rank runs whose last act was a gather, core dumps show
    `AsyncAllgatherWork::~AsyncAllgatherWork` in `ProcessGroupGloo::runLoop`). Sleeping here releases the GIL while
    the interpreter is whole, so a waiting thread takes it and finishes. Skipped after an uncaught exception
    (`sys.last_value` is set): a peer may still wait in a collective, and the process ends as it would have."""
    import torch.distributed as dist

    if not is_distributed() or hasattr(sys, "last_value"):
        return
    peers = dist.get_world_size() > 1 and dist.get_backend() == "gloo"
    dist.destroy_process_group()
    if peers:  # a lone process has no peer work in flight at its end; a notebook's exit need not wait
        time.sleep(GLOO_SETTLE_S)


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
    local_rank = local_rank_from_env(os.environ)
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        from ppokit.engine.quiet import captured_native_output

        if not use_cuda:  # say so, rather than let DeepSpeed warn that it could not detect an accelerator
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        excepthook = sys.excepthook
        with captured_native_output("DeepSpeed's start-up (op compatibility probes)"):
            import deepspeed

            if not use_cuda and os.environ.get("WORLD_SIZE") == "1":
                skip_shm_comm_build()
            forget_destroyed_world()
            init_with_own_port(lambda: deepspeed.init_distributed(dist_backend=backend or ("nccl" if use_cuda else "gloo")))
        if dist.get_world_size() == 1:  # torch prefixes every traceback line "[rank0]:"; one process needs no label
            sys.excepthook = excepthook
        atexit.unregister(leave_process_group_at_exit)  # once, however many groups a notebook starts
        atexit.register(leave_process_group_at_exit)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, device)


def init_with_own_port(init, tries: int = 3) -> None:
    """Run `init`; when the port ppokit picked for a single process (`free_port`) was taken by another process
    between the pick and the store's bind (EADDRINUSE), pick another and try again. A launcher's port is its own
    choice and is never changed."""
    for attempt in range(tries):
        try:
            return init()
        except (RuntimeError, OSError) as exc:
            ours = os.environ.get("MASTER_PORT") == os.environ.get("PPOKIT_SINGLE_PROCESS_PORT")
            if not ours or "EADDRINUSE" not in str(exc) and "address already in use" not in str(exc).lower() \
                    or attempt == tries - 1:
                raise
            os.environ["MASTER_PORT"] = os.environ["PPOKIT_SINGLE_PROCESS_PORT"] = str(free_port())


def forget_destroyed_world() -> None:
    """Drop the process groups DeepSpeed cached from a world that is gone. An in-process vLLM engine that is
    garbage-collected destroys torch.distributed's default group behind DeepSpeed's back (vLLM's cleanup); the next
    Session in that process (a notebook's second run) would then reach a cached group that is no longer registered
    ("Group ... is not registered"). Called only when no default group exists, so nothing live is dropped."""
    from deepspeed.utils import groups

    release = getattr(groups, "_release_process_group_references", None)  # DeepSpeed's own teardown step
    if release is not None and getattr(groups, "_WORLD_GROUP", None) is not None:
        release()


def skip_shm_comm_build() -> None:
    """Tell DeepSpeed its CPU shared-memory all-reduce op is unavailable: it only speeds up collectives
    between processes, yet DeepSpeed compiles it (about a minute on a 2-core CPU) on first use even
    for a single process. Its absence makes DeepSpeed use torch.distributed's own collectives."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


class LaunchError(PpokitError, RuntimeError):
    """The launcher's environment does not say where this process runs."""


def local_rank_from_env(env) -> int:
    """This process's GPU on its node: LOCAL_RANK, else RANK % LOCAL_WORLD_SIZE (ranks numbered node by node, as
    torchrun and the deepspeed launcher number them), else 0 for a single process.

    Never RANK itself: on the second node of 8-GPU machines RANK is 8..15, and `set_device(8)` fails or, worse,
    puts two processes on one GPU when a node has more GPUs than ranks.
    """
    if env.get("LOCAL_RANK") not in (None, ""):
        return int(env["LOCAL_RANK"])
    if env.get("LOCAL_WORLD_SIZE") not in (None, ""):
        return int(env.get("RANK", "0")) % int(env["LOCAL_WORLD_SIZE"])
    if int(env.get("WORLD_SIZE", "1")) > 1:
        raise LaunchError(
            f"WORLD_SIZE={env['WORLD_SIZE']} but neither LOCAL_RANK nor LOCAL_WORLD_SIZE is set, so this process "
            f"(RANK={env.get('RANK', '?')}) cannot tell which GPU of its node is its own; start multi-process runs "
            "with `torchrun` or `deepspeed`, which set LOCAL_RANK, or set LOCAL_RANK (or LOCAL_WORLD_SIZE) yourself.")
    return 0


def _single_process_env_defaults() -> None:
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) > 1:
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in env]
        if missing:
            raise RuntimeError(
                f"WORLD_SIZE={env['WORLD_SIZE']} but {' and '.join(missing)} is not set; start multi-process "
                "runs with `torchrun` or `deepspeed`, which set them."
            )
        env["LOCAL_RANK"] = str(local_rank_from_env(env))
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
