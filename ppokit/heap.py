"""glibc's malloc in a CPU training process: freed memory kept for the next tensor instead of handed back.

A CPU step allocates and frees the same large tensors again and again (vocabulary-wide log-softmax blocks of
70 MB, activations, gradients). glibc serves blocks over its mmap threshold (at most 32 MB) with a fresh `mmap`
and returns them with `munmap` when freed, and trims the top of its heap back to the kernel; so every such tensor
is page-faulted in again, on a VM at the hypervisor's cost, and two threads faulting at once queue on the process's
memory lock. Measured on the 2-core AMX VM of docs/performance.md: a 350 x 49,152 float32 product into a fresh
tensor 17.4 ms vs 6.6 ms with the memory kept (2 threads), the bench's update 3.7 s vs 5.5-6.6 s.

`keep_freed_memory()` (a CPU run, when the sides are built) tells glibc to serve every block from its heap and
never to trim it, the same as `MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=<huge>` set before Python starts; the
values never change a result, only where memory comes from. A user's own `MALLOC_*_` variables or malloc
`GLIBC_TUNABLES` are theirs: nothing is set. `hand_back_freed_memory()` (the end of `train()`) returns what the
heap keeps free to the kernel, so a notebook's process does not hold the training's peak afterwards. Other C
libraries (musl, macOS): nothing happens.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

logger = logging.getLogger("ppokit")
M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
NEVER_TRIM = 2**31 - 1  # mallopt takes an int: 2 GiB of free memory at the heap's top before glibc trims


class Heap:
    kept = False  # keep_freed_memory() took effect in this process


def _glibc():
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def users_own_malloc_settings(environ=os.environ) -> bool:
    """The user tuned glibc's malloc themselves (MALLOC_MMAP_MAX_, MALLOC_TRIM_THRESHOLD_, ..., GLIBC_TUNABLES)."""
    return any(k.startswith("MALLOC_") and k.endswith("_") for k in environ) or \
        "glibc.malloc" in environ.get("GLIBC_TUNABLES", "")


def keep_freed_memory() -> bool:
    """Serve every block from glibc's heap and never trim it (module docstring); True when set here."""
    libc = _glibc()
    if Heap.kept or libc is None or users_own_malloc_settings():
        return Heap.kept
    Heap.kept = bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
    logger.debug("glibc malloc: freed memory kept for reuse (%s)", Heap.kept)
    return Heap.kept


def hand_back_freed_memory() -> None:
    """Return the free memory glibc's heap keeps to the kernel (after training: the process's RSS drops)."""
    libc = _glibc()
    if Heap.kept and libc is not None:
        libc.malloc_trim(0)
