"""Run under torchrun (2 processes) by scripts/gpu_check/run.py ("2 processes"): the LOCAL_RANK rule (issue #30,
fault 8).

Each process checks that, with LOCAL_RANK removed, ppokit derives torchrun's LOCAL_RANK from RANK % LOCAL_WORLD_SIZE,
and that with neither it refuses to start instead of taking RANK; prints `local_rank R: PASS` or `... FAIL: why`.
"""

import os
import sys

from ppokit.engine.distributed import LaunchError, local_rank_from_env


def main() -> int:
    env = dict(os.environ)
    rank, expected = env["RANK"], int(env["LOCAL_RANK"])
    problems = []
    derived = local_rank_from_env({k: v for k, v in env.items() if k != "LOCAL_RANK"})
    if derived != expected:
        problems.append(f"derived local rank {derived}, torchrun's is {expected}")
    try:
        local_rank_from_env({k: v for k, v in env.items() if k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE")})
        problems.append("no LOCAL_RANK and no LOCAL_WORLD_SIZE was accepted")
    except LaunchError:
        pass
    print(f"local_rank {rank}: " + (f"FAIL: {'; '.join(problems)}" if problems else "PASS"), flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
