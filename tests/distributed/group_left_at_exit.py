"""Run under torchrun (2 processes) by test_exit_two_ranks.py: ppokit starts the process group, the ranks all-reduce,
and the script ends the way a user's own script does, without `exit_launched_process` or destroying the group.
An exit handler registered before ppokit's (so run after it) prints whether the group was already left.

    python -m torch.distributed.run --nproc_per_node 2 group_left_at_exit.py [raise]
"""

import atexit
import sys

import torch
import torch.distributed as dist
from dist_helpers import say

from ppokit.engine import init_distributed


def report() -> None:
    say(f"rank {rank}: group left before finalization: {not dist.is_initialized()}")


atexit.register(report)  # exit handlers run last-registered first: this one after ppokit's
info = init_distributed()
rank = info.rank
total = torch.ones(3)
dist.all_reduce(total)
assert total.tolist() == [2.0, 2.0, 2.0]
if sys.argv[1:] == ["raise"]:
    raise RuntimeError("an uncaught error after the collectives")
