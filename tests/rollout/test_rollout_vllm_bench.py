"""`python -m ppokit.bench --compare vllm`'s measurement on a tiny model: both engines generate the same prompts and
sizes; the report has tokens/s of each and their ratio (no timing is asserted). Marker vllm."""

import json

from vllm_real import TINY, needs_vllm

import ppokit.testing
from ppokit.testing import save_tiny_model

pytestmark = needs_vllm


def test_compare_rollout_times_both_engines_on_the_same_work(tmp_path):
    from ppokit.bench.rollout_compare import compare_rollout, format_rollout_table

    model = save_tiny_model(tmp_path / "model", **TINY)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"src": [f"say a {i}:"], "tgt": []}) + "\n" for i in range(8)))
    overrides = {"actor_model_name_or_path": model, "train_datasets": str(data), "rl_algorithm": "grpo",
                 "reward_functions": f"{ppokit.testing.__file__}:letter_a", "global_batch_size": 2, "rollout_n": 2,
                 "global_mini_batch_size": 2, "per_device_train_batch_size": 4, "max_dec_len": 6,
                 "max_prompt_len": 32, "max_length": 64, "seed": 1, "bf16": True, "gpu_memory_utilization": 0.1,
                 "output_dir": str(tmp_path / "out"), "logging_dir": str(tmp_path / "vdl")}
    results = compare_rollout({"config": None, "overrides": overrides}, batches=2)
    assert results["setup"]["batches"] == 2  # compute dtype: bf16, or float32 on a CPU without fast bf16
    for engine in ("ppokit", "vllm"):
        r = results[engine]
        assert 0 < r["generated_tokens"] <= 2 * 2 * 2 * 6 and r["tokens_per_s"] > 0
    assert results["ratio"] == results["vllm"]["tokens_per_s"] / results["ppokit"]["tokens_per_s"]
    assert "vLLM / ppokit" in format_rollout_table(results)
