"""Torch's CPU thread count: fixed by default, so that a run repeats to the bit whatever else the machine runs.

Thread counts change how float reductions are split, so a run whose count moves is not bit-for-bit the run whose
count did not, and a resume made under other load would not equal the uninterrupted run. So the default
(`PPOKIT_THREADS` unset, or `fixed`) keeps the count torch has when the Session is built — torch's default, the
physical cores, or the launcher's `OMP_NUM_THREADS` per rank — for the whole run, idle or beside a busy neighbour.
`PPOKIT_THREADS=N` fixes N threads; `off` leaves torch's count alone and records nothing.

`PPOKIT_THREADS=auto` is the adaptive policy, an explicit choice with a cost. Every parallel region of a t-thread
team waits for its slowest thread; when another process keeps some cores busy, the scheduler deschedules one of
ours and the whole team waits. On the 2-core AMD EPYC (Zen 4) these notes were measured on, beside a busy loop, the
bench step took 34.4 s on 2 threads and 15.6 s with auto (2.2x; docs/performance.md). Before each rollout and update
`ThreadPolicy.fit` counts the cores other processes used since it last looked (all cores' busy time in /proc/stat,
steal included, minus this process's own CPU time, over the wall time between) and gives torch the rest, at least 1
and at most torch's default. The price: the count follows the load, so two runs of one seed differ when the load
differs, and a resumed run no longer equals the uninterrupted one. The first change is said once on the console
with its reason; every count is in the metrics (cpu/rollout_threads, cpu/update_threads).

A `torch.set_num_threads` call of the user's own is kept from then on.

Decoding gets its own fixed count (`DecodingThreads`). A synchronous run (the default: staleness_threshold 0)
decodes on the run's whole count: with the wait following the load (below), two decoding threads on a 2-core
machine make the idle rollout ≈ 1.35x faster and beside a busy neighbour cost about what one thread would
(docs/performance.md, seventh pass). An asynchronous run decodes on half its count (at least 1) in the producer, inline
or in its thread alike, so that the two producers give the same bits: there the decoding thread works beside the
update's threads, and a full decoding team would take the cores the update waits on. Both counts are fixed for the
run, so the bits still repeat, busy or idle; `PPOKIT_THREADS=N` keeps N for every phase.

How the threads wait is not the count: `waiting.WaitGovernor` lets libgomp's idle threads spin long while the run
has its cores and briefly while other processes want them (the same bits, docs/performance.md). Whatever the
policy, before each phase the same /proc/stat reading tells whether other processes took cores this run's threads
needed; the first time they did, the console says so once, with the levers (`slowed_note`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

import torch

from ppokit.args import ConfigError
from ppokit.training.waiting import (
    contended,
    govern_waiting,
    others_between,
    reading,
    usable_cpus,
    waiting_lever,
)

ENV = "PPOKIT_THREADS"
logger = logging.getLogger("ppokit")


class ThreadPolicy:
    """Torch's intra-op thread count for a run: fixed (the default, or N), or fitted to the free cores (auto)."""

    def __init__(self, mode: str | None = None, asynchronous: bool = False):
        self.cpus = usable_cpus()
        self.most = torch.get_num_threads()  # torch's default (or OMP_NUM_THREADS): the cores it may use
        mode = (os.environ.get(ENV, "fixed") if mode is None else mode).strip().lower() or "fixed"
        self.fixed: int | None = None
        self.adaptive = mode == "auto" and "OMP_NUM_THREADS" not in os.environ and len(self.cpus) > 1
        self._said = False  # auto's first change
        self._slowed_said = False
        self.counts_said = False
        if mode.isdigit() and int(mode) > 0:
            self.fixed = int(mode)
            torch.set_num_threads(self.fixed)
        elif mode == "fixed":
            self.fixed = self.most  # does not follow the load: the same bits idle or busy
        elif mode not in ("auto", "off"):
            raise ConfigError(f"the environment variable {ENV}={mode!r}: expected fixed (the default: torch's "
                              "count for the whole run, bit-for-bit repeatable), a positive number of threads, auto "
                              "(follow the free cores: faster beside busy neighbours, but runs and resumes are then "
                              "not bit-for-bit repeatable) or off (leave torch's count alone)")
        if self.adaptive:
            logger.info("%s=auto: torch's thread count follows the cores other processes leave free; faster on a "
                        "busy machine, but two runs of one seed (or a run and its resume) then differ in the last "
                        "bits. Unset %s for a fixed count", ENV, ENV)
        self._chosen: int | None = None
        self._mark = reading(self.cpus)
        self.governor = govern_waiting(self.fixed or torch.get_num_threads(), self.cpus)  # how idle threads wait
        # decoding's own fixed count: only for the default, where ppokit chose the count (N, auto, off: theirs)
        self.decoding = (DecodingThreads(others=self.fixed, decoding=decoding_count(self.fixed, asynchronous))
                         if mode == "fixed" and self.fixed else None)

    def others_since_mark(self) -> float | None:
        """Cores (logical) other processes kept busy since the last reading, steal included; None while the
        window is under 0.5 s (it keeps growing) or /proc/stat cannot be read."""
        now = reading(self.cpus)
        if now[0] - self._mark[0] < 0.5:
            return None
        others = others_between(self._mark, now)
        if others is not None:
            self._mark = now
        return others

    def fit(self) -> int:
        """Set and return the thread count for the next phase (and say once when others slowed this run)."""
        others = self.others_since_mark()
        if not self.adaptive or (self._chosen is not None and torch.get_num_threads() != self._chosen):
            self.adaptive = False  # set by hand since we last chose: theirs from now on
            if others is not None and not self._slowed_said:
                self._slowed_said = slowed_note(others, len(self.cpus), torch.get_num_threads())
            return torch.get_num_threads()
        if others is None:  # too short a window to tell
            return torch.get_num_threads()
        threads = max(1, min(self.most, round(self.most * (1 - others / len(self.cpus)))))
        if threads != torch.get_num_threads():
            # once with its reason; every later count is in the metrics, not on the console
            (logger.debug if self._said else logger.info)(
                "torch threads %d -> %d: other processes kept %.1f of %d cores busy (%s=auto follows the load; "
                "later changes are in cpu/rollout_threads and cpu/update_threads)",
                torch.get_num_threads(), threads, others, len(self.cpus), ENV)
            self._said = True
            torch.set_num_threads(threads)
            if self.governor is not None:
                self.governor.threads = threads
        self._chosen = threads
        return threads


def decoding_count(threads: int, asynchronous: bool = False) -> int:
    """Threads for decoding steps in a run of `threads` threads: all of them in a synchronous run, half (at least
    one) in an asynchronous one, whose producer decodes beside the update (docs/performance.md, seventh pass)."""
    return max(1, threads // 2) if asynchronous else threads


@dataclass(frozen=True)
class DecodingThreads:
    """The run's fixed thread counts: `decoding` for the decoding loop, `others` for every other phase."""

    others: int
    decoding: int

    def now(self) -> int:
        """The count decoding runs with in this thread: `decoding`, unless the count was set by hand
        (`torch.set_num_threads` in a notebook: theirs, for every phase)."""
        current = torch.get_num_threads()
        return self.decoding if current == self.others else current

    @contextlib.contextmanager
    def around_decoding(self):
        """Decode on `decoding` threads, then back to `others` (the calling thread's count: torch keeps one per
        thread, so the producer thread of an asynchronous run switches only its own)."""
        if torch.get_num_threads() != self.others or self.decoding == self.others:  # set by hand, or one count
            yield
            return
        torch.set_num_threads(self.decoding)
        try:
            yield
        finally:
            torch.set_num_threads(self.others)


def slowed_note(others: float, cores: int, threads: int) -> bool:
    """Say (once per run: the caller keeps the answer) that other processes took cores this run's fixed thread
    count needed, with the levers; True when said. Beside `others` busy cores, `threads` threads on `cores` cores
    share them as soon as others > cores - threads: half a core more than that is a step clearly slower than idle."""
    if not contended(others, cores, threads):
        return False
    logger.info("other processes kept %.1f of this machine's %d cores busy while this run computed on %d threads, "
                "so its steps are slower than the same work on an idle machine. The count stays %d (it decides the "
                "bits: the run repeats and resumes exactly). Levers: %s=auto follows the free cores (faster here, "
                "but two runs then differ in the last bits), %s=1 fixes one thread (other bits than %d); %s. "
                "Said once", others, cores, threads, threads, ENV, ENV, threads, waiting_lever())
    return True


def fit_threads(state, phase: str) -> dict[str, float]:
    """Fit the thread count before `phase` of a CPU run; {"cpu/<phase>_threads": count} where ppokit sets the
    count (fixed, N or auto), else {} (off). The rollout's is the count its decoding runs with."""
    policy = getattr(state, "threads", None)
    if policy is None or not (policy.adaptive or policy.fixed):
        return {}
    count = policy.fit()
    if policy.decoding is not None:
        say_counts_once(policy)
        count = policy.decoding.now() if phase == "rollout" else count
    return {f"cpu/{phase}_threads": float(count)}


def say_counts_once(policy: ThreadPolicy) -> None:
    """The default's counts, once per run, at its first phase that sets them."""
    counts = policy.decoding
    if policy.counts_said or counts.now() != counts.decoding:
        return
    policy.counts_said = True
    if counts.decoding == counts.others:
        logger.info("CPU threads: %d for every phase, fixed for the run so that it repeats to the bit (%s=N sets N)",
                    counts.others, ENV)
        return
    logger.info("CPU threads: %d for decoding (beside the update: asynchronous rollouts), %d for everything else, "
                "fixed for the run so that it repeats to the bit (%s=N sets N for every phase)", counts.decoding,
                counts.others, ENV)


def decoding_threads(producer):
    """The decoding loop's thread count around a generation (`DecodingThreads`); nothing where the run keeps one
    count (PPOKIT_THREADS=N, auto, off) or does not run on a CPU."""
    counts = getattr(producer, "decoding_threads", None)
    return counts.around_decoding() if counts is not None else contextlib.nullcontext()
