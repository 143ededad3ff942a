"""The bench's plumbing on a tiny model: both trainers run, every phase and number is reported.
No timing is asserted (benchmarks never run in the test suite; this only checks the wiring)."""

import json
import subprocess
import sys

import pytest

import ppokit.testing
from ppokit.bench.summary import learning_curve, summarize
from ppokit.testing import save_tiny_model


def write_config(tmp_path):
    model = save_tiny_model(tmp_path / "model", seed=0)
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps({"src": [f"say a {i}:"], "tgt": []}) for i in range(8)) + "\n")
    config = tmp_path / "bench.json"
    config.write_text(json.dumps({
        "actor_model_name_or_path": model, "train_datasets": str(data), "rl_algorithm": "grpo",
        "reward_functions": f"{ppokit.testing.__file__}:letter_a", "global_batch_size": 2, "rollout_n": 2,
        "global_mini_batch_size": 2, "per_device_train_batch_size": 4, "max_dec_len": 4, "max_prompt_len": 32,
        "max_length": 64, "learning_rate": 1e-3, "kl_loss_coeff": 0.0, "seed": 1,
    }))
    return config


@pytest.mark.parametrize("compare", [False, True])
def test_bench_runs_and_reports_every_phase(tmp_path, compare):
    if compare:
        pytest.importorskip("trl")
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "ppokit.bench", str(write_config(tmp_path)), "--steps", "2", "--warmup", "1",
           "--out", str(out)] + (["--compare", "trl"] if compare else [])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    names = ["ppokit", "trl"] if compare else ["ppokit"]
    assert list(report["results"]) == names
    for name in names:
        result = report["results"][name]
        assert len(result["steps"]) == 2
        summary = result["summary"]
        for phase in ("rollout", "reward", "update", "rest", "step"):
            assert summary[phase]["max_s"] >= summary[phase]["median_s"] >= 0
        assert summary["generated_tokens_per_s"] > 0 and summary["trained_tokens_per_s"] > 0
        assert 0 < summary["update_share_of_fp32_peak"] and result["peak_rss_bytes"] > 0
    assert "rollout s (median / max)" in done.stdout
    if compare:
        assert "trl / ppokit (median s)" in done.stdout


def test_summary_medians_skip_warmup_and_find_the_reward_target():
    steps = [{"rollout_s": r, "reference_s": 0.0, "old_logprobs_s": 0.0, "reward_s": 0.1, "update_s": 2.0,
              "rest_s": 0.0, "step_s": r + 2.1, "generated_tokens": 10, "trained_tokens": 20, "update_flop": 4e9,
              "reward": w} for r, w in [(9.0, 0.1), (1.0, 0.9), (3.0, 0.9), (2.0, 0.9)]]
    s = summarize(steps, warmup=1, flop_peaks={"bf16": 4e9, "fp32": 1e9})
    assert s["rollout"] == {"median_s": 2.0, "max_s": 3.0}
    assert s["generated_tokens_per_s"] == pytest.approx(30 / 6.0)
    assert s["update_share_of_bf16_peak"] == pytest.approx(0.5) and s["update_share_of_fp32_peak"] == pytest.approx(2.0)
    curve = learning_curve(steps, target=0.9, window=3)
    assert curve["step_to_target"] == 4 and curve["seconds_to_target"] == pytest.approx(11.1 + 3.1 + 5.1 + 4.1)


def test_bench_async_runs_sync_then_async_and_prints_the_bound(tmp_path):
    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "ppokit.bench", str(write_config(tmp_path)), "--steps", "3", "--warmup", "1",
           "--async", "1", "--reward-latency", "0.2", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert list(report["results"]) == ["ppokit", "ppokit async k=1"]
    for result in report["results"].values():
        assert len(result["steps"]) == 3
    # the reward's wait is measured in both runs (the async run's producer thread waits it too)
    assert report["results"]["ppokit"]["summary"]["reward"]["median_s"] >= 0.2
    assert "one-device bound" in done.stdout and "async / bound" in done.stdout


def test_one_device_bound_hides_the_shorter_of_update_and_waiting():
    from ppokit.bench.summary import async_bound_line, one_device_bound

    sync = {"step": {"median_s": 11.0}, "update": {"median_s": 4.0}, "reward": {"median_s": 2.0}}
    assert one_device_bound(sync) == 9.0  # compute 5 + max(update 4, waiting 2)
    assert one_device_bound({**sync, "reward": {"median_s": 6.0}}) == 7.0  # compute 1 + max(4, 6)
    line = async_bound_line(sync, {"step": {"median_s": 9.9}})
    assert "0.90x sync" in line and "async / bound 1.10" in line


def test_bench_neighbours_runs_idle_then_loaded_and_leaves_no_neighbour_behind(tmp_path):
    import os

    out = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "ppokit.bench", str(write_config(tmp_path)), "--steps", "2", "--warmup", "1",
           "--neighbours", "2", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert list(report["results"]) == ["ppokit", "ppokit beside 2 busy"]
    assert [r["neighbours"] for r in report["results"].values()] == [0, 2]
    for result in report["results"].values():
        assert len(result["steps"]) == 2 and result["summary"]["step"]["median_s"] > 0
        assert result["others_cores"] is None or result["others_cores"] >= 0
    assert "ppokit beside 2 busy: step" in done.stdout and "x its idle step" in done.stdout
    assert len(report["neighbour_pids"]) == 2
    for pid in report["neighbour_pids"]:  # killed and reaped when the loaded run ended
        assert not os.path.exists(f"/proc/{pid}")


def test_busy_neighbours_end_when_the_block_ends_even_on_an_error():
    import os

    from ppokit.bench.neighbours import busy_neighbours

    with pytest.raises(RuntimeError), busy_neighbours(2, limit_s=60) as pids:
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids)
        raise RuntimeError("the trainer failed")
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def test_loaded_lines_compare_each_trainer_with_its_idle_run():
    from ppokit.bench.__main__ import loaded_lines, with_neighbours

    runs = with_neighbours([("ppokit", "ppokit", {}), ("trl", "trl", {})], 3)
    assert [(label, n) for label, _, _, n in runs] == [("ppokit", 0), ("ppokit beside 3 busy", 3), ("trl", 0),
                                                        ("trl beside 3 busy", 3)]
    step = lambda s, others, short=None: {"summary": {"step": {"median_s": s}}, "others_cores": others,  # noqa: E731
                                          "wait": {"OMP_WAIT_POLICY": "PASSIVE" if others else None,
                                                   "short_waits": short}}
    text = loaded_lines({"ppokit": step(4.0, 0.1), "ppokit beside 3 busy": step(6.0, 2.9), "trl": step(16.0, None),
                         "trl beside 3 busy": step(48.0, 3.0)})
    governed = loaded_lines({"ppokit": step(4.0, 0.0, 0) | {"wait": {"short_waits": 0}},
                             "ppokit beside 3 busy": step(6.0, 2.9) | {"wait": {"short_waits": 1}}})
    assert "waited governed by ppokit (short spin taken 1 times) beside them, governed by ppokit (short spin " \
           "taken 0 times) idle" in governed
    assert "ppokit beside 3 busy: step 1.50x its idle step; other processes kept 2.9 cores busy" in text
    assert "0.1 during the idle run" in text and "? during the idle run" in text
    assert "threads waited OMP_WAIT_POLICY=PASSIVE beside them, OMP_WAIT_POLICY=PASSIVE idle" in text
    assert "threads waited OMP_WAIT_POLICY=PASSIVE beside them, as libgomp's default idle" in text
    assert "trl / ppokit step: 4.00x idle, 8.00x beside the neighbours" in text
