"""scripts/gpu_smoke_check.py, the pass/fail rule of scripts/gpu_smoke.sh, on written metrics files."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_smoke_check.py"
spec = importlib.util.spec_from_file_location("gpu_smoke_check", SCRIPT)
smoke = importlib.util.module_from_spec(spec)
spec.loader.exec_module(smoke)


def run_with(tmp_path, rewards, diffs):
    rows = [{"step": i + 1, "reward/mean": r, "rollout/logprob_diff": d, "rollout/logprob_diff/max": 10 * d}
            for i, (r, d) in enumerate(zip(rewards, diffs))]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path


def test_rising_reward_and_small_diff_pass(tmp_path):
    assert smoke.main([str(run_with(tmp_path, [0.2, 0.3, 0.5], [0.01, 0.012, 0.011])), "3", "0.05", "hf"]) == 0


def test_flat_reward_large_diff_or_missing_steps_fail(tmp_path):
    assert any("did not rise" in p for p in smoke.check(run_with(tmp_path, [0.5, 0.6, 0.5], [0.01] * 3), 3, 0.05, "x"))
    assert any("0.2000 > 0.05" in p for p in smoke.check(run_with(tmp_path, [0.1, 0.2, 0.3], [0.01, 0.2, 0.01]), 3,
                                                             0.05, "x"))
    assert any("expected 3 logged steps" in p for p in smoke.check(run_with(tmp_path, [0.1, 0.2], [0.01] * 2), 3,
                                                                      0.05, "x"))


def smoke_out(tmp_path, exits: dict, probe: dict | None = None, two: dict | None = None):
    """An OUT folder as gpu_smoke.sh leaves it: <run>.exit (+ metrics), probe/probe.json, two_procs/<check>.*"""
    for name, code in exits.items():
        (tmp_path / f"{name}.exit").write_text(f"{code}\n")
        (tmp_path / name).mkdir()
        run_with(tmp_path / name, [0.2, 0.3, 0.5], [0.01, 0.012, 0.011])
    if probe is not None:
        (tmp_path / "probe").mkdir()
        (tmp_path / "probe" / "probe.json").write_text(json.dumps(
            {k: {"status": v, "detail": f"{k} detail"} for k, v in probe.items()}))
    for name, (code, log) in (two or {}).items():
        (tmp_path / "two_procs").mkdir(exist_ok=True)
        (tmp_path / "two_procs" / f"{name}.exit").write_text(f"{code}\n")
        (tmp_path / "two_procs" / f"{name}.log").write_text(log)
    return tmp_path


GOOD_TWO = {"local_rank": (0, "local_rank 0: PASS\nlocal_rank 1: PASS\n"),
            "skip_group": (0, "rank 1: 4 sequences, 2 groups, dropped 1\nrank 0: 4 sequences, 2 groups, dropped 0\n")}


def lines(out, capsys):
    code = smoke.main(["summary", str(out), "3", "0.05"])
    return code, [line for line in capsys.readouterr().out.splitlines() if line.startswith("item ")]


def test_summary_has_one_line_per_item_and_passes_when_everything_ran(tmp_path, capsys):
    out = smoke_out(tmp_path, {"hf": 0, "vllm": 0, "ppo": 0, "zero3": 0},
                    {"device": "PASS", "attention": "PASS", "zero3": "PASS"}, GOOD_TWO)
    code, found = lines(out, capsys)
    assert code == 0
    numbers = [line.split()[1] for line in found]
    assert numbers == ["1", "1", "2", "3", "4", "5", "6", "7", "8", "9", "-", "-"]
    assert all(line.endswith(")") and ": PASS (" in line for i, line in enumerate(found) if numbers[i] != "4")
    assert ": SKIP (needs 2 GPUs" in found[4]


def test_summary_fails_an_item_on_a_failed_piece_and_skips_what_did_not_run(tmp_path, capsys):
    two = dict(GOOD_TWO, skip_group=(0, "rank 1: 4 sequences, 2 groups\nrank 0: 2 sequences, 1 groups\n"))
    out = smoke_out(tmp_path, {"hf": 0, "zero3": 1}, {"device": "PASS", "attention": "SKIP", "zero3": "PASS"}, two)
    code, found = lines(out, capsys)
    by_item = {line.split(":")[0]: line for line in found}
    assert code == 1
    assert ": FAIL (run zero3 exited 1" in by_item["item 7 ZeRO-3"]
    assert ": FAIL (2-process skip_group: batch sizes per rank" in by_item["item 9 skip_group keeps ranks' batch sizes equal"]
    assert ": SKIP (run vllm did not run" in by_item["item 2 vLLM wakes up after an update (cache emptied first)"]
    assert ": SKIP (" in by_item["item 5 flash-attention-2 only with bf16/fp16, the reference's attention = the actor's"]
    assert ": PASS (" in found[0] and ": SKIP (run ppo did not run)" in found[1]  # item 1: the GRPO run, the critic
