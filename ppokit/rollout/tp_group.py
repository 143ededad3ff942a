"""The rollout tensor-parallel group as a tiny messenger: each member contributes its prompts, all
members receive everyone's (in group order). Real groups use torch.distributed; tests pass their own.
"""

from __future__ import annotations

from typing import Protocol

from ppokit.rollout.vllm_args import TPLayout


class TPGroup(Protocol):
    size: int
    index: int  # this rank's position in the group

    def all_gather(self, obj) -> list:
        """`obj` of every member, in group order (a collective: every member calls it)."""
        ...


class SoloGroup:
    """A group of one (tensor-parallel degree 1): nothing to exchange."""

    size = 1
    index = 0

    def all_gather(self, obj) -> list:
        return [obj]


class TorchTPGroup:
    """A torch.distributed subgroup of the job's default group (every rank must build its own at once)."""

    def __init__(self, layout: TPLayout, world_size: int):
        import torch.distributed as dist

        groups = [list(range(first, first + layout.tp)) for first in range(0, world_size, layout.tp)]
        # new_subgroups_by_enumeration is collective: all ranks create all groups, each keeps its own.
        self._group, _ = dist.new_subgroups_by_enumeration(groups)
        self.size = layout.tp
        self.index = layout.index_in_group

    def all_gather(self, obj) -> list:
        import torch.distributed as dist

        out = [None] * self.size
        dist.all_gather_object(out, obj, group=self._group)
        return out


def make_tp_group(layout: TPLayout, world_size: int) -> TPGroup:
    return SoloGroup() if layout.tp == 1 else TorchTPGroup(layout, world_size)
