"""ZeRO-3 over 2 processes (torchrun, gloo, CPU): the hf engine's copy refresh, saving and loading a full folder,
and saving and loading LoRA adapters gather one module's weights at a time (the adapters alone for LoRA), never the
model: the largest gather is at most the largest module (docs/scaling.md: no GPU holds the full weights)."""

import json

import pytest
from dist_helpers import HERE, tail, torchrun

from ppokit.testing import save_tiny_model


@pytest.mark.slow  # ~3 min: two ZeRO-3 processes on 2 cores
def test_zero3_paths_gather_at_most_one_module_on_two_ranks(tmp_path):
    model = save_tiny_model(tmp_path / "model", seed=0)
    out = tmp_path / "out"
    out.mkdir()
    done = torchrun(HERE / "zero3_gathers.py", model, str(out), nproc=2)
    assert done.returncode == 0, tail(done)
    for rank in range(2):
        found = json.loads((out / f"rank{rank}.json").read_text())
        assert found["copy_equals_weights"]
        assert set(found["largest"]) == {"hf copy refresh", "save_hf", "load_weights", "save_adapter",
                                         "load_weights (adapter)"}, found
        for path, size in found["largest"].items():
            assert 0 < size <= found["largest_module"] < found["total"], (path, found)
        assert found["largest"]["save_adapter"] == found["adapters"]  # the adapters alone, not the frozen base
        assert found["largest"]["load_weights (adapter)"] == found["adapters"]
