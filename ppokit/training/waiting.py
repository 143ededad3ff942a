"""How torch's idle OpenMP threads wait: long spins while the run has its cores, short ones once others want them.

The thread count decides a run's bits (`threads.py` keeps it fixed); how an idle thread waits for the next parallel
region decides only where the time goes. torch's Linux wheels run on GNU OpenMP (libgomp), whose idle threads spin
`GOMP_SPINCOUNT` times (300,000 by default, milliseconds) before they sleep — which is what keeps a step of many
small parallel regions fast on an idle machine — except while libgomp manages more threads than the process has
CPUs: then they spin 100 times (libgomp's count for an oversubscribed machine) and sleep. Beside a busy neighbour
the long spin is what makes a step several times slower: every spin takes a core from the neighbour, or from our
own thread that still has work, and each parallel region waits for the thread the scheduler put aside.

libgomp reads both counts once, when torch loads, but compares the threads it manages with the CPUs at every wait.
So `WaitGovernor` reads /proc/stat every half second and, while other processes keep busy cores that this run's
threads need, keeps an idle OpenMP team of its own open (a thread that ran one parallel region of more threads
than the CPUs left, then sleeps): libgomp then manages more threads than CPUs and every idle thread of the process
spins briefly. When the others have been quiet for two seconds that thread ends, libgomp frees its team, and the
long spin is back. A thread of this process that works beside the run's team (the asynchronous producer's rollout,
`working_beside`) counts as one more busy core. Nothing here changes what any kernel computes, only how long idle
threads spin.

Where the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT the wait is theirs and nothing runs; nor where torch is not on
libgomp. docs/performance.md has the measurements.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time

import torch

USER_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
BUSY_MARGIN = 0.5  # others keep half a core more busy than this run's threads leave free: the cores are contended
SAMPLE_S = 0.5
QUIET_S = 2.0  # others quiet this long: the long spin again


def usable_cpus() -> set[int]:
    """The CPUs this process may run on."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def reading(cpus: set[int]) -> tuple[float, float | None, float]:
    """(monotonic seconds, busy seconds of `cpus` since boot or None, this process's CPU seconds)."""
    return time.monotonic(), busy_seconds(cpus), own_seconds()


def others_between(before: tuple, after: tuple) -> float | None:
    """Cores other processes kept busy between two `reading`s (steal included): the cores' busy time minus this
    process's own CPU time, over the wall time; None where /proc/stat was unreadable or no time passed."""
    (t0, busy0, own0), (t1, busy1, own1) = before, after
    if busy0 is None or busy1 is None or t1 <= t0:
        return None
    return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)


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


def contended(others: float, cores: int, threads: int) -> bool:
    """Whether other processes keeping `others` cores busy take cores from `threads` threads on `cores` cores."""
    return others >= cores - threads + BUSY_MARGIN


def team_size(cores: int, threads: int) -> int:
    """Threads of the idle team that makes libgomp manage more threads than `cores`: the run's own team manages
    `threads`, a new team of n adds n - 1 (its first thread is ours)."""
    return max(2, cores - threads + 2)


class IdleTeam:
    """A thread that ran one parallel region of `size` threads and sleeps until `close`: libgomp counts that
    region's threads as managed until the thread ends (its pool is freed at thread exit)."""

    def __init__(self, size: int, libgomp: ctypes.CDLL):
        self._release = threading.Event()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._hold, args=(size, libgomp, ready), name="ppokit-idle-team",
                                        daemon=True)
        self._thread.start()
        ready.wait(timeout=30)

    def _hold(self, size: int, libgomp: ctypes.CDLL, ready: threading.Event) -> None:
        try:
            torch.get_num_threads()  # torch sets this thread's count at its first call: before ours, not after
            # this thread's own count only: torch.set_num_threads would also change the count new threads start with
            libgomp.omp_set_num_threads(size)
            torch.empty(size * 65536).fill_(1.0)  # one parallel region of `size` threads (host: OpenMP)
        finally:
            ready.set()
        self._release.wait()

    def close(self) -> None:
        self._release.set()
        self._thread.join(timeout=30)


class WaitGovernor:
    """Keeps an `IdleTeam` open while other processes contend for the run's cores (see the module's docstring).

    `threads`: the run's thread count (the thread policy updates it when it changes the count)."""

    def __init__(self, cpus: set[int], threads: int, libgomp: ctypes.CDLL, sample_s: float = SAMPLE_S,
                 quiet_s: float = QUIET_S):
        self.cores, self.threads, self.libgomp = len(cpus), threads, libgomp
        self.cpus, self.sample_s, self.quiet_s = cpus, sample_s, quiet_s
        self.team: IdleTeam | None = None
        self.short_waits = 0  # times the short spin was taken
        self.beside = 0  # threads of this process working beside the run's team (the asynchronous producer)
        self._others = 0.0  # the last reading
        self._deciding = threading.Lock()  # the watcher and a producer thread may both decide
        self._quiet_since: float | None = None
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="ppokit-wait", daemon=True)

    def start(self) -> WaitGovernor:
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watcher.is_alive():
            self._watcher.join(timeout=30)
        self._let_go()

    def _watch(self) -> None:
        before = reading(self.cpus)
        while not self._stop.wait(self.sample_s):
            after = reading(self.cpus)
            others, before = others_between(before, after), after
            if others is not None:
                self.observe(others, after[0])

    def observe(self, others: float, now: float) -> None:
        """One reading: `others` cores kept busy by other processes, at time `now` (monotonic seconds)."""
        with self._deciding:
            self._others = others
            self._decide(others + self.beside, now)

    def _decide(self, others: float, now: float) -> None:
        if contended(others, self.cores, self.threads):
            self._quiet_since = None
            if self.team is None and not self._stop.is_set():
                self.team = IdleTeam(team_size(self.cores, self.threads), self.libgomp)
                self.short_waits += 1
            return
        if self.team is not None:
            self._quiet_since = now if self._quiet_since is None else self._quiet_since
            if now - self._quiet_since >= self.quiet_s:
                self._let_go()

    def _let_go(self) -> None:
        team, self.team, self._quiet_since = self.team, None, None
        if team is not None:
            team.close()


def waiting_lever() -> str:
    """One clause for a console note: how this process's idle threads wait, and the lever."""
    if any(os.environ.get(v) for v in USER_VARIABLES):
        return ("the wait is yours (" + ", ".join(f"{v}={os.environ.get(v, '')!r}" for v in USER_VARIABLES)
                + "); OMP_WAIT_POLICY=PASSIVE lets idle threads sleep at once")
    if _governor is None:
        return "torch does not run on GNU OpenMP here, so ppokit leaves how its threads wait alone"
    return "idle threads already spin only briefly while other processes want the cores"


@contextlib.contextmanager
def working_beside():
    """Around work a thread of this process does beside the run's own team (the asynchronous producer's rollout):
    it needs a core that the team's spinning threads would otherwise take, as a busy neighbour would."""
    governor = _governor
    if governor is None:
        yield
        return
    with governor._deciding:
        governor.beside += 1
        governor._decide(governor._others + governor.beside, time.monotonic())
    try:
        yield
    finally:
        with governor._deciding:
            governor.beside -= 1


_governor: WaitGovernor | None = None
_lock = threading.Lock()


def govern_waiting(threads: int, cpus: set[int] | None = None) -> WaitGovernor | None:
    """The process's `WaitGovernor`, started at the first call (later calls update its thread count); None where
    the wait is the user's (OMP_WAIT_POLICY or GOMP_SPINCOUNT set) or torch does not run on libgomp."""
    global _governor
    with _lock:
        if _governor is None:
            libgomp = None if any(os.environ.get(v) for v in USER_VARIABLES) else torch_libgomp()
            if libgomp is None:
                return None
            _governor = WaitGovernor(usable_cpus() if cpus is None else cpus, threads, libgomp).start()
        _governor.threads = threads
        return _governor


def torch_libgomp() -> ctypes.CDLL | None:
    """The GNU OpenMP runtime torch loaded (its wheel's own copy), or None (another runtime, or not Linux)."""
    torch.get_num_threads()  # torch's thread pool is set up (and libgomp loaded) by now
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libgomp" in line.rsplit("/", 1)[-1]}
    except OSError:
        return None
    torch_dir = os.path.dirname(torch.__file__)
    ordered = sorted(paths, key=lambda p: not p.startswith(torch_dir))  # torch's own copy first
    for path in ordered:
        try:
            return ctypes.CDLL(path)  # already loaded: the same handle
        except OSError:
            continue
    return None
