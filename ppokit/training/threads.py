"""Torch's CPU thread count on a machine shared with other processes.

Every parallel region of a t-thread team waits for its slowest thread; when another process keeps some of the
cores busy, the scheduler deschedules one of ours for a time slice and the whole team waits. On the 2-core AMD EPYC
(Zen 4) these notes were measured on, with a 2-thread GRPO run beside it, the default-work rollout (32 rows x 32
tokens, bf16) took 7.7-8.4 s on 1 thread and 18.8-30.1 s on 2; a 16 x 100-token forward and backward 16-21 s on 1
and 24-29 s on 2. Alone on the machine, 2 threads are the faster (docs/performance.md).

So, on a CPU device, before each rollout and update `ThreadPolicy.fit` counts the cores other processes used since
it last looked (all cores' busy time in /proc/stat, steal included, minus this process's own CPU time, over the
wall time between) and gives torch the rest, at least 1 and at most torch's default (the physical cores). The cost is a /proc read per phase.

An explicit choice is never overridden: `PPOKIT_THREADS=N` fixes N threads, `PPOKIT_THREADS=off` (the test suite's
setting) or an `OMP_NUM_THREADS` in the environment (the launcher sets one per rank) leaves torch's count alone, and
a `torch.set_num_threads` call of the user's own is kept from then on. Thread counts change how some reductions
are split, so a run whose count moved is not bit-for-bit the same as one whose count did not: fix the count for
runs that must match exactly.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from ppokit.args import ConfigError

ENV = "PPOKIT_THREADS"
logger = logging.getLogger("ppokit")


def _cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


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


def own_seconds() -> float:
    """CPU-seconds this process (all its threads) has used."""
    t = os.times()
    return t.user + t.system


class ThreadPolicy:
    """Fits torch's intra-op thread count to the cores other processes leave free (see the module docstring)."""

    def __init__(self, mode: str | None = None):
        self.cpus = _cpus()
        self.most = torch.get_num_threads()  # torch's default: the physical cores it may use
        mode = (os.environ.get(ENV, "auto") if mode is None else mode).strip().lower()
        self.fixed: int | None = None
        self.adaptive = mode == "auto" and "OMP_NUM_THREADS" not in os.environ and len(self.cpus) > 1
        if mode.isdigit() and int(mode) > 0:
            self.fixed = int(mode)
            torch.set_num_threads(self.fixed)
        elif mode not in ("auto", "off"):
            raise ConfigError(f"the environment variable {ENV}={mode!r}: expected auto (the default: fit the free "
                              "cores), off (leave torch's count alone) or a positive number of threads")
        self._chosen: int | None = None
        self._mark = self._sample()

    def _sample(self) -> tuple[float, float | None, float]:
        return time.monotonic(), busy_seconds(self.cpus), own_seconds()

    def fit(self) -> int:
        """Set and return the thread count for the next phase."""
        if not self.adaptive or (self._chosen is not None and torch.get_num_threads() != self._chosen):
            self.adaptive = False  # set by hand since we last chose: theirs from now on
            return torch.get_num_threads()
        now = self._sample()
        (t0, busy0, own0), (t1, busy1, own1) = self._mark, now
        if busy0 is None or busy1 is None or t1 - t0 < 0.5:  # too short a window to tell
            return torch.get_num_threads()
        self._mark = now
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)  # cores (logical) busy with others
        threads = max(1, min(self.most, round(self.most * (1 - others / len(self.cpus)))))
        if threads != torch.get_num_threads():
            logger.info("torch threads %d -> %d: other processes kept %.1f of %d cores busy (%s=N fixes the count)",
                        torch.get_num_threads(), threads, others, len(self.cpus), ENV)
            torch.set_num_threads(threads)
        self._chosen = threads
        return threads


def fit_threads(state, phase: str) -> dict[str, float]:
    """Fit the thread count before `phase` of a CPU run; {"cpu/<phase>_threads": count} where ppokit chooses the
    count (auto or PPOKIT_THREADS=N), else {}."""
    policy = getattr(state, "threads", None)
    if policy is None or not (policy.adaptive or policy.fixed):
        return {}
    return {f"cpu/{phase}_threads": float(policy.fit())}
