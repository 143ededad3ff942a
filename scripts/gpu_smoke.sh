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
    if ! "$PYTHON" scripts/gpu_smoke_check.py "$run" "$STEPS" "$MAX_DIFF" "$engine"
    then
        status=1
    fi
done
exit $status
