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
