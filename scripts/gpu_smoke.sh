#!/usr/bin/env bash
# GPU smoke test: one run on ONE GPU that exercises each GPU-only fault of issue #30 and prints one line per item,
#   item N <what>: PASS | FAIL | SKIP (why)
# from these pieces (outputs in $OUT, default output/gpu_smoke; each piece's log in $OUT/<piece>.log):
#   hf      GRPO on the default config (SmolLM2-135M, arithmetic) with the hf engine, with a KL loss (a reference) and
#           two optimizer steps per rollout (old log-probs): batches on the GPU, packed forwards, the decoding loop
#   vllm    the same with the vLLM engine, where vLLM is installed: engine order, sleep/wake after each update
#   ppo     PPO (critic) with use_flash_attention: critic values and update on the GPU, FA2 with bf16
#   zero3   GRPO under sharding stage3 with a checkpoint every step: partitioned load, module-by-module save
#   probe   scripts/gpu_smoke_probe.py: CPU-built batches on a CUDA model, FA2 only with bf16/fp16 and the reference's
#           attention, ZeRO-3's peak GPU memory while saving
#   two_procs  2 processes (torchrun, gloo: NCCL refuses two ranks on one GPU, so these need no GPU of their own):
#           the LOCAL_RANK rule and skip_group's equal batch sizes across ranks
# TP seeds (item 4) need 2 GPUs: with 2 visible GPUs a vLLM run with tensor_parallel_degree 2 and dropout is added.
# For each training run also: reward/mean rises and rollout/logprob_diff stays under MAX_DIFF (the "learning" lines).
#
#   bash scripts/gpu_smoke.sh                          # everything, 3 steps, GPU 0
#   PIECES="probe two_procs" bash scripts/gpu_smoke.sh # only some pieces (a short device budget)
#   STEPS=6 CUDA_VISIBLE_DEVICES=1 bash scripts/gpu_smoke.sh
#   MAX_DIFF=0.1 bash scripts/gpu_smoke.sh             # a looser log-prob tolerance
#
# Exit status 0 when no item FAILed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
STEPS=${STEPS:-3}
OUT=${OUT:-output/gpu_smoke}
MAX_DIFF=${MAX_DIFF:-0.05}   # bf16 rollouts vs bf16-autocast training: |diff| is typically ~1e-2 per token
PIECES=${PIECES:-"hf vllm ppo zero3 probe two_procs"}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_smoke: no CUDA GPU visible to $PYTHON; this script is for a GPU machine." >&2
    exit 1
fi
mkdir -p "$OUT"
has_vllm=0; "$PYTHON" -c "import vllm" 2>/dev/null && has_vllm=1
gpus=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")

wants() { [[ " $PIECES " == *" $1 "* ]]; }

train() {  # train NAME CONFIG ARGS...: one training run; its exit code in $OUT/NAME.exit
    local name=$1 config=$2; shift 2
    rm -rf "${OUT:?}/$name"
    echo "=== $name: $STEPS steps -> $OUT/$name"
    "$PYTHON" run_ppo.py "$config" --max_steps "$STEPS" --output_dir "$OUT/$name" --logging_dir "$OUT/$name/vdl" \
        --evaluation_strategy no --disable_tqdm true "$@" >"$OUT/$name.log" 2>&1
    echo $? >"$OUT/$name.exit"
    tail -n 3 "$OUT/$name.log"
}

# More prompts per step than the CPU default (4): a GPU does them in seconds and the reward signal is steadier.
GRPO=(--global_batch_size 32 --global_mini_batch_size 16 --learning_rate 1e-5 --kl_loss_coeff 0.01
      --save_strategy no)
wants hf && train hf config/grpo_argument.json --rollout_engine hf "${GRPO[@]}"
if wants vllm; then
    if [[ $has_vllm == 1 ]]; then
        train vllm config/grpo_argument.json --rollout_engine vllm "${GRPO[@]}"
        if [[ $gpus -ge 2 ]]; then
            CUDA_VISIBLE_DEVICES=0,1 train vllm_tp2 config/grpo_argument.json --rollout_engine vllm \
                --tensor_parallel_degree 2 --hidden_dropout_prob 0.1 "${GRPO[@]}"
        fi
    else
        echo "gpu_smoke: vLLM is not installed; the vLLM items are skipped (pip install vllm to check them)."
    fi
fi
wants ppo && train ppo config/ppo_argument.json --rollout_engine hf --use_flash_attention true --save_strategy no
wants zero3 && train zero3 config/grpo_argument.json --rollout_engine hf --sharding stage3 --kl_loss_coeff 0.01 \
    --save_strategy steps --save_steps 1 --save_total_limit 1
if wants probe; then
    echo "=== probe -> $OUT/probe"
    "$PYTHON" scripts/gpu_smoke_probe.py "$OUT/probe" 2>&1 | tee "$OUT/probe.log" | grep '^probe '
fi
if wants two_procs; then
    mkdir -p "$OUT/two_procs"
    for check in local_rank skip_group; do
        script=scripts/gpu_smoke_ranks.py
        [[ $check == skip_group ]] && script=tests/distributed/skip_group_ranks.py
        echo "=== 2 processes: $check"
        CUDA_VISIBLE_DEVICES="" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node 2 "$script" \
            >"$OUT/two_procs/$check.log" 2>&1
        echo $? >"$OUT/two_procs/$check.exit"
    done
fi
echo "=== summary"
"$PYTHON" scripts/gpu_smoke_check.py summary "$OUT" "$STEPS" "$MAX_DIFF"
