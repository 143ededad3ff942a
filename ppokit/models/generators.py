"""The process's global random generators kept across a block that may draw from them.

For work that runs in some processes of a seed and not in others (a model's conversion into the cache, done once per
machine), or that reseeds generators it shares with the trainer (vLLM's worker in this process): what the run samples
afterwards must not depend on it.
"""

from __future__ import annotations

import contextlib
import random

import numpy as np
import torch


@contextlib.contextmanager
def global_generators_kept():
    """Python's, numpy's and torch's (CPU and every CUDA device's) generators as they were before the block."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
