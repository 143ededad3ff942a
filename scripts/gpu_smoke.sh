#!/usr/bin/env bash
# GPU smoke test: the default config (config/grpo_argument.json, SmolLM2-135M, arithmetic rule reward) on ONE GPU,
# a few steps with the hf engine and, where vLLM is installed, with the vLLM engine. For each engine it checks
#   - the run finishes and writes one metrics.jsonl row per step,
#   - reward/mean rises: the last step's is above the first step's,
#   - rollout/logprob_diff (mean |engine log-prob - trainer log-prob| over response tokens) is small.
# Nobody has run this on a GPU yet (the development machines have none); run it and report the numbers it prints.
#
#   bash scripts/gpu_smoke.sh                    # 3 steps, GPU 0
#   STEPS=6 CUDA_VISIBLE_DEVICES=1 bash scripts/gpu_smoke.sh
#   MAX_DIFF=0.1 bash scripts/gpu_smoke.sh       # a looser log-prob tolerance
#
# Exit status 0 when every engine that ran passed, 1 otherwise. Outputs go to $OUT (default output/gpu_smoke).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
STEPS=${STEPS:-3}
OUT=${OUT:-output/gpu_smoke}
MAX_DIFF=${MAX_DIFF:-0.05}   # bf16 rollouts vs bf16-autocast training: |diff| is typically ~1e-2 per token
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_smoke: no CUDA GPU visible to $PYTHON; this script is for a GPU machine." >&2
    exit 1
fi

engines=(hf)
if "$PYTHON" -c "import vllm" 2>/dev/null; then
    engines+=(vllm)
else
    echo "gpu_smoke: vLLM is not installed; checking the hf engine only (pip install vllm to check both)."
fi

status=0
for engine in "${engines[@]}"; do
    run="$OUT/$engine"
    rm -rf "$run"
    echo "=== $engine engine: $STEPS steps -> $run"
    # More prompts per step than the CPU default (4): a GPU does them in seconds and the reward signal is steadier.
    "$PYTHON" run_ppo.py config/grpo_argument.json \
        --rollout_engine "$engine" --max_steps "$STEPS" --global_batch_size 32 --global_mini_batch_size 32 \
        --learning_rate 1e-5 --output_dir "$run" --logging_dir "$run/vdl" --save_strategy no \
        --evaluation_strategy no --disable_tqdm true
    if ! "$PYTHON" - "$run" "$STEPS" "$MAX_DIFF" "$engine" <<'EOF'
import json
import sys
from pathlib import Path

run, steps, max_diff, engine = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
diffs = [r["rollout/logprob_diff"] for r in rows if "rollout/logprob_diff" in r]
maxes = [r["rollout/logprob_diff/max"] for r in rows if "rollout/logprob_diff/max" in r]
print(f"{engine}: reward/mean per step {[round(x, 3) for x in rewards]}")
print(f"{engine}: rollout/logprob_diff per step {[round(x, 4) for x in diffs]} (max |diff| {[round(x, 3) for x in maxes]})")
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
for p in problems:
    print(f"{engine}: FAIL: {p}")
print(f"{engine}: {'FAIL' if problems else 'PASS'}")
sys.exit(1 if problems else 0)
EOF
    then
        status=1
    fi
done
exit $status
