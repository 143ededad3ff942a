"""Fixtures shared by all test rooms (keep small: tiny models only, built in code)."""

from __future__ import annotations

import os

import pytest

# Torch's thread count follows the machine's load in real runs (ppokit/training/threads.py); the suite's
# bit-for-bit comparisons (resume = no interruption, 2 ranks = 1 process) need it fixed.
os.environ.setdefault("PPOKIT_THREADS", "off")
# One intra-op thread for the tiny models (set before torch is imported; the processes and notebook kernels the
# tests start inherit it): with two, the threads mostly wait on each other over microsecond-sized ops, and beside
# any other busy process the wait grows several-fold. tests/checkpoint/conftest.py did this for its room already;
# tests/training/test_threads.py sets the counts it tests explicitly. An explicit OMP_NUM_THREADS wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from ppokit.testing import save_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny random Llama + byte-level ChatML tokenizer saved as a HF folder (eos <|im_end|>, pad <pad>)."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-llama") / "model", arch="llama", seed=0)


@pytest.fixture(scope="session")
def tiny_qwen_dir(tmp_path_factory) -> str:
    """Like `tiny_model_dir`, as a Qwen2 architecture."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-qwen2") / "model", arch="qwen2", seed=1)
