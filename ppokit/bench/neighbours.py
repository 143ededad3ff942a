"""CPU-bound neighbour processes for `python -m ppokit.bench --neighbours N`: what a notebook, a test run or a
browser does to a trainer on a shared machine, made repeatable.

Each neighbour is a one-thread busy loop that ends by itself at its deadline or when the bench that started it is
gone (its parent changes), and the bench kills and reaps every one when the timed run ends, so none is left behind.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys

# argv: the bench's pid, seconds to live. Checks its parent every ~10 ms of work.
BUSY_LOOP = """import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


@contextlib.contextmanager
def busy_neighbours(count: int, limit_s: float = 6 * 3600):
    """Start `count` busy processes (each ends after `limit_s` at the latest), yield their pids, kill them after."""
    import os

    procs = []
    try:
        for _ in range(count):
            procs.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(os.getpid()), str(limit_s)],
                                          stdin=subprocess.DEVNULL))
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
