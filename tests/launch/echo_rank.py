"""Tiny distributed smoke script for the launcher test.

Started by torchrun (or DeepSpeed's launcher) with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT in the environment: it joins a gloo process group, all-reduces its rank, and rank 0
prints ``sum=<total>`` (0 + 1 = 1 for two processes). Extra command-line arguments are echoed
by rank 0 as ``args=<json list>`` so tests can check that script arguments arrive unchanged.
"""

import json
import os
import sys

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group(backend="gloo")  # reads the env:// variables the launcher set
    rank = dist.get_rank()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    if rank == 0:
        print(f"world_size={dist.get_world_size()}", flush=True)
        print(f"sum={int(total.item())}", flush=True)
        print(f"args={json.dumps(sys.argv[1:])}", flush=True)
        print(f"local_rank_env={os.environ.get('LOCAL_RANK')}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
