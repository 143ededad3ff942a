"""Checks one gpu_smoke.sh run: python scripts/gpu_smoke_check.py OUTPUT_DIR STEPS MAX_DIFF ENGINE.

Reads OUTPUT_DIR/metrics.jsonl; passes (exit 0) when every step logged reward/mean and
rollout/logprob_diff, the last step's reward/mean is above the first's, and no step's
rollout/logprob_diff exceeds MAX_DIFF. Prints the per-step values either way.
"""

import json
import sys
from pathlib import Path


def check(run: Path, steps: int, max_diff: float, engine: str) -> list[str]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    diffs = [r["rollout/logprob_diff"] for r in rows if "rollout/logprob_diff" in r]
    maxes = [r["rollout/logprob_diff/max"] for r in rows if "rollout/logprob_diff/max" in r]
    print(f"{engine}: reward/mean per step {[round(x, 3) for x in rewards]}")
    print(f"{engine}: rollout/logprob_diff per step {[round(x, 4) for x in diffs]} "
          f"(max |diff| {[round(x, 3) for x in maxes]})")
    problems = []
    if len(rewards) != steps:
        problems.append(f"expected {steps} logged steps with reward/mean, found {len(rewards)}")
    elif not rewards[-1] > rewards[0]:
        problems.append(f"reward/mean did not rise: first step {rewards[0]:.3f}, last step {rewards[-1]:.3f} "
                        "(a noisy check over few steps: rerun with STEPS=10 before suspecting the trainer)")
    if len(diffs) != steps:
        problems.append(f"expected rollout/logprob_diff on every step, found it on {len(diffs)}")
    elif max(diffs) > max_diff:
        problems.append(f"rollout/logprob_diff reached {max(diffs):.4f} > {max_diff}: the engine's and the trainer's "
                        "log-probs disagree (wrong weights synced, wrong temperature, or precision); see docs/scaling.md")
    return problems


def main(argv: list[str]) -> int:
    run, steps, max_diff, engine = Path(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    problems = check(run, steps, max_diff, engine)
    for p in problems:
        print(f"{engine}: FAIL: {p}")
    print(f"{engine}: {'FAIL' if problems else 'PASS'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
