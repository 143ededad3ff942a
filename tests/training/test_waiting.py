"""How idle threads wait: libgomp's long spin while the run has its cores, its short one while others contend for
them (`ppokit.training.waiting`), switched at run time by an idle OpenMP team; never what a kernel computes."""

import os
import subprocess
import sys
import time

import pytest

from ppokit.training import waiting
from ppokit.training.waiting import WaitGovernor, contended, team_size


def test_cores_are_contended_when_others_take_half_a_core_the_run_needs():
    assert not contended(0.4, cores=2, threads=2)  # a bit of background
    assert contended(0.5, cores=2, threads=2)
    assert not contended(1.0, cores=2, threads=1)  # the neighbour has the other core
    assert not contended(3.0, cores=8, threads=4)  # room for both
    assert contended(4.5, cores=8, threads=4)


def test_the_idle_team_is_big_enough_to_outnumber_the_cores():
    # the run's team manages `threads` threads; a new team of n adds n - 1: together more than the cores
    for cores, threads in ((2, 2), (2, 1), (16, 8), (64, 64), (4, 1)):
        assert threads + team_size(cores, threads) - 1 > cores


class FakeTeam:
    opened: list["FakeTeam"] = []

    def __init__(self, size, libgomp):
        self.size, self.closed = size, False
        FakeTeam.opened.append(self)

    def close(self):
        self.closed = True


def test_the_governor_opens_a_team_while_contended_and_lets_go_after_two_quiet_seconds(monkeypatch):
    FakeTeam.opened = []
    monkeypatch.setattr(waiting, "IdleTeam", FakeTeam)
    governor = WaitGovernor({0, 1}, threads=2, libgomp=None)  # not started: readings are fed by hand
    governor.observe(0.1, now=0.0)
    assert governor.team is None  # idle: libgomp's long spin
    governor.observe(1.0, now=0.5)  # a busy neighbour
    governor.observe(0.9, now=1.0)
    assert len(FakeTeam.opened) == 1 and governor.team is FakeTeam.opened[0] and FakeTeam.opened[0].size == 2
    governor.observe(0.0, now=1.5)  # quiet for a moment: keeps the short spin
    governor.observe(0.0, now=3.0)
    assert governor.team is not None
    governor.observe(1.0, now=3.5)  # back: the quiet time starts over
    governor.observe(0.0, now=4.0)
    governor.observe(0.0, now=5.5)
    assert governor.team is not None
    governor.observe(0.0, now=6.0)  # two quiet seconds
    assert governor.team is None and FakeTeam.opened[0].closed
    governor.observe(2.0, now=6.5)
    assert len(FakeTeam.opened) == 2 and governor.short_waits == 2
    governor.stop()
    assert FakeTeam.opened[1].closed


def test_the_asynchronous_producer_working_beside_the_run_takes_the_short_spin_meanwhile(monkeypatch):
    """The producer thread decodes beside the update: a core the update's idle threads would spin on, as a busy
    neighbour's (measured: the asynchronous step 9.5 s with the long spin against 6.3 s with the short one)."""
    FakeTeam.opened = []
    monkeypatch.setattr(waiting, "IdleTeam", FakeTeam)
    governor = WaitGovernor({0, 1}, threads=2, libgomp=None)
    monkeypatch.setattr(waiting, "_governor", governor)
    governor.observe(0.0, now=0.0)
    assert governor.team is None
    with waiting.working_beside():
        assert governor.team is not None and governor.beside == 1  # at once, not at the next reading
        governor.observe(0.0, now=5.0)  # the watcher's readings keep it while the producer works
        assert governor.team is not None
    assert governor.beside == 0
    governor.observe(0.0, now=5.5)
    governor.observe(0.0, now=7.5)  # quiet for two seconds after the producer finished
    assert governor.team is None and len(FakeTeam.opened) == 1
    wide = WaitGovernor(set(range(8)), threads=2, libgomp=None)  # 8 cores: room for the producer beside 2 threads
    monkeypatch.setattr(waiting, "_governor", wide)
    with waiting.working_beside():
        assert wide.team is None


def test_the_wait_is_the_users_when_they_set_it(monkeypatch):
    monkeypatch.setattr(waiting, "_governor", None)
    monkeypatch.setenv("GOMP_SPINCOUNT", "300000")
    assert waiting.govern_waiting(2, {0, 1}) is None
    assert "the wait is yours" in waiting.waiting_lever()


MECHANISM_CHILD = r"""
import os, sys, time, torch
from ppokit.training.waiting import IdleTeam, team_size, torch_libgomp

libgomp = torch_libgomp()
if libgomp is None:
    print("NO-LIBGOMP"); sys.exit(0)
torch.set_num_threads(2)
x = torch.randn(400_000)

def tasks():
    return len(os.listdir("/proc/self/task"))

def idle_cpu(rounds=150):
    # CPU seconds the other threads burn per 2-thread parallel region while the main thread then sleeps 1 ms
    x.mul(2.0)
    process, main = sum(os.times()[:2]), time.thread_time()
    for _ in range(rounds):
        x.mul(2.0)
        time.sleep(0.001)
    return ((sum(os.times()[:2]) - process) - (time.thread_time() - main)) / rounds

long_before = idle_cpu()
before = tasks()
team = IdleTeam(team_size(len(os.sched_getaffinity(0)), 2), libgomp)
opened = tasks() - before
short = idle_cpu()
team.close()
time.sleep(0.3)
closed = tasks() - before
long_after = idle_cpu()
print("RESULT", long_before, short, long_after, opened, closed)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: one thread spins while one sleeps")
def test_an_idle_team_makes_libgomps_idle_threads_stop_spinning_until_it_ends():
    """In a fresh process (libgomp's own spin, no wait variables): after each parallel region the team's second
    thread spins through the main thread's 1 ms sleep; with an idle team open it sleeps at once; closed, it spins
    again. Measured as the CPU time of the threads other than the main one."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", MECHANISM_CHILD], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    if "NO-LIBGOMP" in done.stdout:
        pytest.skip("torch does not run on GNU OpenMP here")
    long_before, short, long_after, opened, closed = (float(v) for v in done.stdout.split("RESULT")[1].split())
    assert opened >= 2 and closed == 0  # the team's thread and its OpenMP worker(s), all gone after close
    assert long_before > 0.0003, done.stdout  # the worker spun through a good part of each 1 ms sleep
    assert short < 0.25 * long_before, done.stdout
    assert long_after > 0.5 * long_before, done.stdout


def test_a_busy_neighbour_opens_the_team_within_seconds():
    """The governor's own /proc/stat readings: one CPU-bound process beside a 2-thread run on 2 cores."""
    libgomp = waiting.torch_libgomp()
    cpus = set(list(os.sched_getaffinity(0))[:2])
    if libgomp is None or len(cpus) < 2:
        pytest.skip("needs GNU OpenMP and two CPUs")
    neighbour = subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {sorted(cpus)})\n"
                                  "while True: pass"])
    governor = WaitGovernor(cpus, threads=2, libgomp=libgomp, sample_s=0.2).start()
    try:
        deadline = time.monotonic() + 20
        while governor.team is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert governor.team is not None and governor.short_waits == 1
    finally:
        neighbour.kill()
        neighbour.wait()
        governor.stop()
    assert governor.team is None
