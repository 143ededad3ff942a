import os

import pytest

from ppokit.engine import distributed


def test_multi_process_env_without_master_is_explained(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(RuntimeError, match="torchrun"):
        distributed._single_process_env_defaults()


def test_plain_python_becomes_rank_zero_of_one(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    distributed._single_process_env_defaults()

    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]) == ("0", "1", "0")
    assert os.environ["MASTER_ADDR"] == "127.0.0.1" and 0 < int(os.environ["MASTER_PORT"]) < 65536


def test_launcher_env_is_kept(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    distributed._single_process_env_defaults()

    assert (os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["MASTER_PORT"]) == ("3", "1", "29500")


@pytest.mark.parametrize(("env", "expected"), [
    ({"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1"}, 1),
    ({"RANK": "9", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, 1),  # second node of 8-GPU machines
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, 3),
    ({}, 0),
    ({"RANK": "0", "WORLD_SIZE": "1"}, 0),
])
def test_local_rank_comes_from_local_rank_or_local_world_size(env, expected):
    assert distributed.local_rank_from_env(env) == expected


def test_local_rank_never_falls_back_to_rank(monkeypatch):
    """RANK 9 on a second node is GPU 1 there, not GPU 9 (issue #30, fault 8): without LOCAL_RANK or
    LOCAL_WORLD_SIZE a multi-process start is refused with a sentence."""
    with pytest.raises(distributed.LaunchError, match="LOCAL_RANK nor LOCAL_WORLD_SIZE"):
        distributed.local_rank_from_env({"RANK": "9", "WORLD_SIZE": "16"})
    for key, value in {"RANK": "9", "WORLD_SIZE": "16", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    distributed._single_process_env_defaults()
    assert os.environ["LOCAL_RANK"] == "1"
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    with pytest.raises(distributed.LaunchError):
        distributed._single_process_env_defaults()


def test_a_port_taken_between_pick_and_bind_is_picked_again_but_a_launchers_port_is_kept(monkeypatch):
    from ppokit.engine.distributed import init_with_own_port

    monkeypatch.setenv("MASTER_PORT", "50373")
    monkeypatch.setenv("PPOKIT_SINGLE_PROCESS_PORT", "50373")
    calls = []

    def init():
        calls.append(os.environ["MASTER_PORT"])
        if len(calls) == 1:
            raise RuntimeError("The server socket has failed to listen on any local network address. port: 50373, "
                               "code: -98, name: EADDRINUSE, message: address already in use")

    init_with_own_port(init)
    assert len(calls) == 2 and calls[1] != "50373" == calls[0]
    assert os.environ["MASTER_PORT"] == os.environ["PPOKIT_SINGLE_PROCESS_PORT"] == calls[1]

    monkeypatch.setenv("PPOKIT_SINGLE_PROCESS_PORT", "1")  # the launcher's MASTER_PORT: its choice, not retried
    calls.clear()
    with pytest.raises(RuntimeError, match="EADDRINUSE"):
        init_with_own_port(init)
    assert len(calls) == 1


class FakeDist:
    """torch.distributed as the exit handler sees it: a live group of `world` ranks on `backend`."""

    def __init__(self, world: int, backend: str):
        self.world, self.backend, self.destroyed = world, backend, False

    def get_world_size(self):
        return self.world

    def get_backend(self):
        return self.backend

    def destroy_process_group(self):
        self.destroyed = True


@pytest.mark.parametrize("world, backend, waits", [(2, "gloo", True), (2, "nccl", False), (1, "gloo", False)])
def test_exit_handler_leaves_the_group_and_waits_only_for_gloo_peers(monkeypatch, world, backend, waits):
    """CUDA's side (nccl) emulated: the group is left at exit on every backend; only gloo ranks with peers wait for
    the worker threads that still hold collective work (the abort this handler prevents is gloo's)."""
    import torch.distributed

    fake, slept = FakeDist(world, backend), []
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    for name in ("get_world_size", "get_backend", "destroy_process_group"):
        monkeypatch.setattr(torch.distributed, name, getattr(fake, name))
    monkeypatch.setattr(distributed.time, "sleep", slept.append)
    monkeypatch.delattr(distributed.sys, "last_value", raising=False)
    distributed.leave_process_group_at_exit()
    assert fake.destroyed and slept == ([distributed.GLOO_SETTLE_S] if waits else [])

    fake.destroyed = False  # after an uncaught exception a peer may wait in a collective: nothing is torn down
    monkeypatch.setattr(distributed.sys, "last_value", RuntimeError("uncaught"), raising=False)
    distributed.leave_process_group_at_exit()
    assert not fake.destroyed
