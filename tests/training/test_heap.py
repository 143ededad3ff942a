"""A CPU run keeps the memory an update frees in glibc's heap (heap.py): the settings reach mallopt once, never over
the user's own MALLOC_* variables, never for a GPU run."""

import os
import subprocess
import sys

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


@pytest.mark.parametrize("mode,asked", [("always [madvise] never\n", True), ("[always] madvise never\n", True),
                                        ("always madvise [never]\n", False)])
def test_huge_pages_are_asked_for_where_the_kernel_grants_them_on_request(tmp_path, monkeypatch, mode, asked):
    setting = tmp_path / "enabled"
    setting.write_text(mode)
    monkeypatch.delenv(heap.HUGE_PAGES_VARIABLE, raising=False)
    assert heap.ask_for_huge_pages(str(setting)) is asked
    assert (heap.HUGE_PAGES_VARIABLE in os.environ) is asked


def test_the_users_huge_page_choice_and_a_kernel_without_them_are_left_alone(tmp_path, monkeypatch):
    setting = tmp_path / "enabled"
    setting.write_text("always [madvise] never\n")
    monkeypatch.setenv(heap.HUGE_PAGES_VARIABLE, "0")
    assert not heap.ask_for_huge_pages(str(setting))
    assert os.environ[heap.HUGE_PAGES_VARIABLE] == "0"
    monkeypatch.delenv(heap.HUGE_PAGES_VARIABLE)
    assert not heap.ask_for_huge_pages(str(tmp_path / "missing"))


def test_importing_ppokit_sets_it_before_torch_allocates():
    """torch reads THP_MEM_ALLOC_ENABLE once, at its first CPU allocation: ppokit's import must come first and must not
    import torch itself (a fresh interpreter shows both)."""
    env = {k: v for k, v in os.environ.items() if k != heap.HUGE_PAGES_VARIABLE}
    out = subprocess.run([sys.executable, "-c", "import sys, os, ppokit; print('torch' in sys.modules, "
                          f"os.environ.get('{heap.HUGE_PAGES_VARIABLE}'))"], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    granted = os.path.exists(heap.HUGE_PAGES_SETTING) and "[never]" not in open(heap.HUGE_PAGES_SETTING).read()
    assert out == ["False", "1" if granted else "None"]
