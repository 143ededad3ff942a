"""How torch's OpenMP threads wait between parallel regions, chosen before torch is imported; never their count.

The thread count decides how float reductions are split, so it decides a run's bits (`training/threads.py` keeps it
fixed). How an idle thread waits for the next parallel region decides only where the time goes. torch's pip wheels
on Linux use GNU OpenMP (libgomp), whose idle threads spin about 300,000 times (3 ms on paper, more with the
`pause` latency of recent Intel cores) before they sleep. Alone on the machine that is free; beside a CPU-bound
neighbour every spin is a slice of a core taken from the neighbour or from our own thread that still has work, and
each parallel region then waits for a thread the scheduler put aside. So ppokit lets idle threads sleep at once
(OMP_WAIT_POLICY=PASSIVE) when other processes already keep cores busy at start, and otherwise spin 1,000 times (tens
of µs: longer than most gaps between the kernels of one phase, meant to keep idle speed) before they sleep, so that
a neighbour arriving later costs about its share. docs/performance.md has the measurements (and what could not be
measured: the idle cost, on the shared machine these choices were made on).

libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded (at `import torch`), so this runs when
`ppokit` is imported (`run_ppo.py`, `python -m ppokit.main_ppo`, the bench's workers, a notebook importing ppokit
first). Either variable set by the user is theirs: nothing is set. Imported after torch, nothing can change the
wait any more (`torch.set_num_threads` still works); the thread policy says so once.

No torch here: this module runs before torch is imported.
"""

from __future__ import annotations

import os
import sys
import time

SPIN_COUNT = "GOMP_SPINCOUNT"
WAIT_POLICY = "OMP_WAIT_POLICY"
BOUNDED_SPINS = "1000"  # tens of µs of `pause` before a futex sleep (libgomp's own count when oversubscribed)
BUSY_CORES = 0.5  # other processes keeping this many of our cores busy at start: the machine is shared
SAMPLE_S = 0.1


def chosen_waiting(environ, others_busy: float | None) -> dict[str, str]:
    """The variables ppokit sets for libgomp: {} when the user set either one (theirs); passive waiting when
    other processes kept `others_busy` >= BUSY_CORES cores busy at start (every spin is then taken from someone who
    has work); else a bounded spin (idle speed, and a neighbour arriving later costs far less than with libgomp's
    own 300,000 spins)."""
    if environ.get(WAIT_POLICY) or environ.get(SPIN_COUNT):
        return {}
    if others_busy is not None and others_busy >= BUSY_CORES:
        return {WAIT_POLICY: "PASSIVE"}
    return {SPIN_COUNT: BOUNDED_SPINS}


def others_busy_now(seconds: float = SAMPLE_S) -> float | None:
    """Cores (of those this process may run on) other processes kept busy over the next `seconds`, from /proc/stat
    minus this process's own CPU time; None where /proc/stat cannot be read (then: the bounded spin)."""
    try:
        cpus = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    first, own0, t0 = busy_seconds(cpus), own_seconds(), time.monotonic()
    time.sleep(seconds)
    second, own1, t1 = busy_seconds(cpus), own_seconds(), time.monotonic()
    if first is None or second is None:
        return None
    return max(0.0, (second - first) - (own1 - own0)) / (t1 - t0)


def own_seconds() -> float:
    """CPU-seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system


def busy_seconds(cpus: set[int]) -> float | None:
    """CPU-seconds the cores in `cpus` spent busy since boot (user, nice, system, irq, softirq, steal), or None
    where /proc/stat cannot be read."""
    try:
        with open("/proc/stat") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    ticks = 0
    for line in lines:
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
            ticks += user + nice + system + irq + softirq + steal
    return ticks / os.sysconf("SC_CLK_TCK")


class Waiting:
    """What happened at `import ppokit`: the variables set, or that torch was already loaded (too late)."""

    set_here: dict[str, str] = {}
    too_late = False
    told = False  # the too-late note was said (once per process)


def choose_before_torch() -> None:
    """Set libgomp's waiting in this process's environment unless torch is loaded already (then only remember)."""
    if os.environ.get(WAIT_POLICY) or os.environ.get(SPIN_COUNT):
        return
    if "torch" in sys.modules:
        Waiting.too_late = True
        return
    wanted = chosen_waiting(os.environ, others_busy_now())
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
    if Waiting.set_here.get(WAIT_POLICY):
        return (f"idle threads already sleep at once ({WAIT_POLICY}=PASSIVE: the machine was busy when this run "
                "started)")
    return (f"idle threads already sleep after a short spin ({SPIN_COUNT}={os.environ.get(SPIN_COUNT)}); "
            f"{WAIT_POLICY}=PASSIVE, set before Python starts, lets them sleep at once")
