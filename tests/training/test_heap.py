"""A CPU run keeps the memory an update frees in glibc's heap (heap.py): the settings reach mallopt once, never over
the user's own MALLOC_* variables, never for a GPU run."""

import pytest

from ppokit.training import heap


class FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return 1


@pytest.fixture
def fake(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(heap, "glibc", lambda: libc)
    monkeypatch.setattr(heap, "_done", False)
    for name in heap.USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return libc


def test_a_cpu_run_fixes_the_mmap_threshold_and_keeps_a_gigabyte_free_once(fake):
    import torch

    assert heap.keep_freed_memory(torch.device("cpu"))
    assert fake.calls == [(heap.M_MMAP_THRESHOLD, 32 * 2**20), (heap.M_TRIM_THRESHOLD, 2**30)]
    assert not heap.keep_freed_memory(torch.device("cpu"))  # once per process
    assert len(fake.calls) == 2


def test_a_gpu_run_or_the_users_malloc_variables_leave_the_heap_alone(fake, monkeypatch):
    import torch

    assert not heap.keep_freed_memory(torch.device("cuda", 0))
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert not heap.keep_freed_memory(torch.device("cpu"))
    assert fake.calls == []


def test_glibc_is_found_where_it_runs():
    import platform

    libc = heap.glibc()
    if platform.libc_ver()[0] == "glibc":
        assert libc is not None and libc.gnu_get_libc_version().startswith(b"2.")
