"""DAPO dynamic sampling on 2 ranks keeps the ranks' prompt loaders in step (~20 s; slow)."""

import json

import pytest
from dist_helpers import HERE, tail, torchrun


@pytest.mark.slow
def test_ranks_draw_prompts_equally_often(tmp_path, tiny_model_dir, prompts_file):
    done = torchrun(HERE / "dynamic_sampling.py", tiny_model_dir, prompts_file, str(tmp_path))
    assert done.returncode == 0, tail(done)
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert [s["groups"] for s in first] == [s["groups"] for s in second] == [2, 2, 2]  # whole groups per rank
    assert first == second  # same draws, same loader position, same number of rounds on both ranks
    assert first[-1]["rollouts_drawn"] > 3  # some rounds were repeated: the test exercised the loop
