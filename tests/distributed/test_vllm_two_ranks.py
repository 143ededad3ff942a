"""Two ranks, one vLLM tensor-parallel group of 2 (a fake vLLM module), through the whole Session (~20 s; slow)."""

import json

import pytest
from dist_helpers import HERE, tail, torchrun


@pytest.mark.slow
def test_a_tp_group_of_two_ranks_generates_together_and_resyncs(tmp_path, tiny_model_dir, prompts_file):
    done = torchrun(HERE / "vllm_two_ranks.py", tiny_model_dir, prompts_file, str(tmp_path))
    assert done.returncode == 0, tail(done)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for report in ranks:
        assert report["engine"] == "VLLMRolloutEngine" and not report["problems"]
        kw = report["kwargs"]
        assert (kw["tensor_parallel_size"], kw["seed"], kw["distributed_executor_backend"]) == (2, 1, "external_launcher")
        assert (kw["max_num_seqs"], kw["max_model_len"]) == (16, 32 + 8)
        # per step: wake the weights, load the trained ones, wake the KV cache, generate, sleep again
        per_step = ["wake_up", "load_weights", "wake_up", "reset_prefix_cache", "generate", "sleep"]
        collapsed = [e for i, e in enumerate(report["events"]) if not (e == "load_weights" and report["events"][i - 1] == e)]
        assert collapsed == ["sleep"] + per_step * 2
        assert all(s["logprob_diff"] is not None and s["logprob_diff"] > 0 for s in report["steps"])
    # both members sent the same requests: the group's prompts, rank 0's first, 2 prompts per rank per step,
    # one request per sample (rollout_n 2)
    assert ranks[0]["requests"] == ranks[1]["requests"]
    assert [len(r) for r in ranks[0]["requests"]] == [8, 8]
