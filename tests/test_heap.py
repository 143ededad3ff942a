"""glibc's heap in a CPU run: freed tensors stay for reuse while training, and go back to the kernel after."""

import platform
import subprocess
import sys

import pytest

from ppokit.heap import users_own_malloc_settings

CHILD = """
import os, sys
import torch
from ppokit import heap

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

kept = heap.keep_freed_memory() if sys.argv[1] == "keep" else False
base = rss()
x = torch.ones(32 * 1024 * 1024)  # 128 MB, written: resident
del x
after_free = rss() - base
heap.hand_back_freed_memory()
print(kept, after_free // 2**20, (rss() - base) // 2**20)
"""

glibc_only = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="glibc's malloc only")


def _child(mode: str, **env) -> tuple[bool, int, int]:
    import os

    clean = {k: v for k, v in os.environ.items() if not (k.startswith("MALLOC_") or k == "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-c", CHILD, mode], env={**clean, **env}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    kept, freed_mb, trimmed_mb = done.stdout.split()
    return kept == "True", int(freed_mb), int(trimmed_mb)


@glibc_only
def test_a_freed_tensor_stays_in_the_heap_until_training_ends():
    kept, resident_after_free, resident_after_trim = _child("keep")
    assert kept and resident_after_free >= 120  # the 128 MB stay, for the next tensor of that size
    assert resident_after_trim < 16  # handed back at the end of train()
    kept, resident_after_free, _ = _child("default")
    assert not kept and resident_after_free < 16  # glibc's own way: munmap at once (and page faults next time)


@glibc_only
def test_the_users_own_malloc_settings_are_theirs():
    kept, resident_after_free, _ = _child("keep", MALLOC_MMAP_MAX_="65536")
    assert not kept and resident_after_free < 16
    assert users_own_malloc_settings({"MALLOC_TRIM_THRESHOLD_": "0"})
    assert users_own_malloc_settings({"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0"})
    assert not users_own_malloc_settings({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX2", "MALLOC": "x"})
