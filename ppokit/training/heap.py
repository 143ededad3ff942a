"""glibc's heap on a CPU run: memory an update frees is kept for the next one rather than handed back to the kernel.

An update allocates and frees the same few hundred MB at every micro-batch (activations, gradients, the head's
buffers). glibc returns the free memory at the top of its heap to the kernel once more than M_TRIM_THRESHOLD is free
there (by default a threshold that moves with the blocks freed, at most 64 MB), and serves blocks above
M_MMAP_THRESHOLD (moving too, at most 32 MB) from fresh mappings. Either way the next micro-batch's blocks are fresh
pages, which the kernel faults in and zeroes one 4 KB page at a time (≈ 1.4 µs each here: 200,000-300,000 faults, a
second of kernel time, per update of the bench's work). `keep_freed_memory` fixes the mmap threshold at glibc's
largest (32 MB, where its moving threshold ends anyway) and lets up to 1 GB stay free at the heap's top: the peak
resident memory is unchanged (what is kept was in use at the peak), the update ≈ 9 % shorter (docs/performance.md,
eighth pass). Blocks above 32 MB still come from mappings; the LM head and the embedding tied to it keep their own
buffers for theirs (`algos/head_logprobs`, `algos/embedding_grad`).

Blocks of 2 MB or more are, besides, asked to be backed by the kernel's 2 MB pages: `ask_for_huge_pages` (run when
ppokit is imported, before torch's first CPU allocation, the moment torch reads THP_MEM_ALLOC_ENABLE) sets that
variable, and torch's allocator then advises huge pages (madvise) for such blocks. A fresh 113 MB gradient is then
faulted in with ≈ 60 faults instead of ≈ 28,000 (a 169 MB cast pair: 43-49 ms → 10-13 ms alone; an update ≈ 4 %
shorter, docs/performance.md, tenth pass).

Nothing here changes a computed value. Where the user set one of glibc's MALLOC_* variables (or
THP_MEM_ALLOC_ENABLE), or torch does not run on glibc, nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

logger = logging.getLogger("ppokit")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
KEEP_FREE_BYTES = 2**30
MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: mallopt refuses more
HUGE_PAGES_VARIABLE = "THP_MEM_ALLOC_ENABLE"  # torch's allocator: madvise(MADV_HUGEPAGE) for blocks of 2 MB or more
HUGE_PAGES_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"
USER_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
                  "MALLOC_ARENA_MAX")
_done = False


def glibc():
    """The C library when it is glibc (it has mallopt and gnu_get_libc_version), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.mallopt  # noqa: B018 - raises AttributeError where there is none
        return libc
    except (OSError, AttributeError):
        return None


def keep_freed_memory(device) -> bool:
    """For a run computing on the CPU: glibc keeps up to KEEP_FREE_BYTES free at its heap's top and maps only blocks
    above 32 MB afresh. Returns whether it was set (once per process; never over the user's MALLOC_* settings)."""
    global _done
    if _done or getattr(device, "type", str(device)) != "cpu":
        return False
    if any(v in os.environ for v in USER_VARIABLES):
        logger.debug("glibc's heap is left as the MALLOC_* variables set it")
        return False
    libc = glibc()
    if libc is None:
        return False
    _done = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, KEEP_FREE_BYTES))
    return _done


def ask_for_huge_pages(setting: str = HUGE_PAGES_SETTING) -> bool:
    """Let torch's CPU allocator ask for 2 MB pages for its blocks of 2 MB or more, where the kernel grants them on
    request (transparent huge pages in `madvise` or `always` mode) and the user did not set THP_MEM_ALLOC_ENABLE.
    Takes effect only before torch's first CPU allocation (ppokit's import). Returns whether it was set."""
    if HUGE_PAGES_VARIABLE in os.environ:
        return False
    try:
        with open(setting) as handle:
            mode = handle.read()
    except OSError:  # not Linux, or no transparent huge pages
        return False
    if "[madvise]" not in mode and "[always]" not in mode:
        return False
    os.environ[HUGE_PAGES_VARIABLE] = "1"
    return True
