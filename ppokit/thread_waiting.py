"""How torch's OpenMP threads wait between parallel regions, chosen before torch is imported; never their count.

The thread count decides how float reductions are split, so it decides a run's bits (`training/threads.py` keeps it
fixed). How an idle thread waits for the next parallel region decides only where the time goes. torch's pip wheels
on Linux use GNU OpenMP (libgomp), whose idle threads spin about 300,000 times (3 ms on paper, ≈ 10 ms with the
`pause` latency of recent Intel cores) before they sleep. Alone on the machine that is free; beside a CPU-bound
neighbour every spin is a slice of a core taken from the neighbour or from our own thread that still has work, and
each parallel region then waits for a thread the scheduler put aside. A bounded spin keeps the short waits between
the kernels of one phase cheap (idle speed) and lets a thread with nothing to do sleep within about a millisecond.
docs/performance.md has the measurements behind the number.

libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded (at `import torch`), so this runs when
`ppokit` is imported (`run_ppo.py`, `python -m ppokit.main_ppo`, the bench's workers, a notebook importing ppokit
first). Either variable set by the user is theirs: nothing is set. Imported after torch, nothing can change the
wait any more (`torch.set_num_threads` still works); the thread policy says so once.

No torch here: this module runs before torch is imported.
"""

from __future__ import annotations

import os
import sys

SPIN_COUNT = "GOMP_SPINCOUNT"
WAIT_POLICY = "OMP_WAIT_POLICY"
BOUNDED_SPINS = "10000"  # ≈ 0.1-1 ms of `pause` before a futex sleep; see docs/performance.md


def chosen_waiting(environ) -> dict[str, str]:
    """The variables ppokit sets for libgomp: {} when the user set either one (theirs), else a bounded spin."""
    if environ.get(WAIT_POLICY) or environ.get(SPIN_COUNT):
        return {}
    return {SPIN_COUNT: BOUNDED_SPINS}


class Waiting:
    """What happened at `import ppokit`: the variables set, or that torch was already loaded (too late)."""

    set_here: dict[str, str] = {}
    too_late = False
    told = False  # the too-late note was said (once per process)


def choose_before_torch() -> None:
    """Set libgomp's waiting in this process's environment unless torch is loaded already (then only remember)."""
    wanted = chosen_waiting(os.environ)
    if not wanted:
        return
    if "torch" in sys.modules:
        Waiting.too_late = True
        return
    os.environ.update(wanted)
    Waiting.set_here = wanted


def waiting_lever() -> str:
    """One clause for a console note: how this process's threads wait and what the user can change."""
    if os.environ.get(WAIT_POLICY) or (os.environ.get(SPIN_COUNT) and not Waiting.set_here):
        return (f"the wait is yours ({WAIT_POLICY}={os.environ.get(WAIT_POLICY, '')!r}, "
                f"{SPIN_COUNT}={os.environ.get(SPIN_COUNT, '')!r}); {WAIT_POLICY}=PASSIVE lets idle threads sleep "
                "at once")
    if Waiting.too_late:
        return (f"torch was imported before ppokit, so its threads spin ≈ 3-10 ms at every wait: import ppokit "
                f"first, or set {SPIN_COUNT}={BOUNDED_SPINS} (or {WAIT_POLICY}=PASSIVE) before Python starts")
    return (f"idle threads already sleep after a short spin ({SPIN_COUNT}={os.environ.get(SPIN_COUNT)}); "
            f"{WAIT_POLICY}=PASSIVE, set before Python starts, lets them sleep at once")
