"""Fields of PaddleNLP's base ``paddlenlp.trainer.TrainingArguments`` and ``LlmMetaConfig`` that RL
configs use, with PaddleNLP's defaults (except ``output_dir`` and ``logging_dir``, see below)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from .model_data import GROUP_CONFIG

Interval = Literal["no", "steps", "epoch"]
Scheduler = Literal["linear", "cosine", "constant", "constant_with_warmup", "polynomial"]


class BaseTrainingArguments(BaseModel):
    """Optimiser, schedule, precision, logging, saving and parallelism keys."""

    model_config = GROUP_CONFIG

    output_dir: str = Field(
        "output", description="Checkpoints and metrics go here; ppokit default 'output' (PaddleNLP requires the key).")
    do_train: bool = Field(False, description="PaddleNLP trains only when true; ppokit's run_ppo.py always trains.")
    do_eval: bool = Field(False, description="Run evaluation (forced on by evaluation_strategy other than 'no').")
    max_steps: int = Field(
        -1, description="Rollout steps to run (one rollout + its updates each; PaddleNLP counted optimizer "
        "steps); -1 -> num_train_epochs.")
    num_train_epochs: float = Field(1.0, gt=0.0, description="Passes over the training prompts when max_steps <= 0.")
    seed: int = Field(42, description="Random seed for data order, sampling and initialisation.")
    # --- optimiser and schedule ---
    learning_rate: float = Field(5e-05, ge=0.0, description="Actor learning rate (AdamW).")
    weight_decay: float = Field(0.0, ge=0.0, description="Actor AdamW weight decay.")
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0, description="AdamW beta1.")
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0, description="AdamW beta2.")
    adam_epsilon: float = Field(1e-08, gt=0.0, description="AdamW epsilon.")
    max_grad_norm: float = Field(1.0, ge=0.0, description="Gradient clipping norm; 0 = no clipping.")
    lr_scheduler_type: Scheduler = Field("linear", description="Learning-rate schedule.")
    warmup_ratio: float = Field(0.0, ge=0.0, le=1.0, description="Warm-up fraction of max_steps.")
    warmup_steps: int = Field(0, ge=0, description="Warm-up steps; >0 overrides warmup_ratio.")
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="Micro-steps per optimizer step: read in per-device mode, computed in global mode.")
    # --- precision ---
    bf16: bool = Field(False, description=(
        "bfloat16 training and generation (autocast over float32 weights). On a CPU without bf16 matrix "
        "instructions (x86 without AVX512-BF16/AMX) ppokit computes in float32 instead, with a warning: "
        "emulated bf16 is tens of times slower there; PPOKIT_CPU_BF16=1 forces bf16."))
    fp16: bool = Field(False, description="float16 training and generation.")
    fp16_opt_level: Literal["O0", "O1", "O2"] = Field(
        "O1", description="PaddleNLP AMP level. Accepted for PaddleNLP compatibility; no effect here, because "
        "ppokit's precision follows bf16/fp16 alone (only checked: O2 needs bf16 or fp16, as in PaddleNLP).")
    amp_master_grad: bool = Field(False, description="PaddleNLP fp32 master grads under O2; no effect in ppokit.")
    amp_custom_black_list: list[str] | None = Field(
        None, description="PaddleNLP ops forced to fp32; no effect in ppokit.")
    amp_custom_white_list: list[str] | None = Field(
        None, description="PaddleNLP ops forced to low precision; no effect in ppokit.")
    # --- evaluation, logging, saving ---
    evaluation_strategy: Interval = Field("no", description="When to evaluate: no, steps or epoch.")
    eval_steps: int | None = Field(None, description="Evaluate every N steps; None/0 -> logging_steps.")
    max_evaluate_steps: int = Field(-1, description="Max evaluation batches; -1 = the whole eval set.")
    per_device_eval_batch_size: int = Field(8, ge=1, description="Eval prompts per rank per generation call.")
    logging_steps: int = Field(500, ge=1, description="Log every N steps.")
    logging_strategy: Interval = Field(
        "steps", description="When to print the step summary (and log sample rows): no, steps (every logging_steps) "
        "or epoch; metrics.jsonl and VisualDL get every step's metrics whatever it says.")
    logging_dir: str | None = Field(
        "vdl_log", description="VisualDL log folder (ppokit default 'vdl_log'; PaddleNLP's None meant "
        "output_dir/runs/...).")
    report_to: list[str] | None = Field(
        None, description="Loggers: visualdl, tensorboard, wandb, all or none; None -> ['visualdl'].")
    run_name: str | None = Field(None, description="Run name shown by loggers.")
    wandb_http_proxy: str | None = Field(
        None, description="HTTP proxy used by wandb. Accepted for PaddleNLP compatibility; no effect here, "
        "because ppokit's wandb backend uses the standard HTTPS_PROXY/HTTP_PROXY variables; set those.")
    disable_tqdm: bool | None = Field(None, description="Hide progress bars; None -> False.")
    log_level: Literal["passive", "debug", "info", "warning", "error", "critical"] = Field(
        "passive", description="How much run_ppo.py prints: passive/info = set-up stages, steps and notes; "
        "debug adds DeepSpeed's config and what its start-up probes wrote; warning = only problems.")
    save_strategy: Interval = Field("steps", description="When to save checkpoints: no, steps or epoch.")
    save_steps: int = Field(500, ge=1, description="Save a checkpoint every N steps.")
    save_total_limit: int | None = Field(None, ge=1, description="Keep at most N checkpoints; None = all.")
    ignore_save_lr_and_optim: bool | None = Field(
        False, description="Leave optimizer and scheduler state out of checkpoints (resume then restarts them).")
    overwrite_output_dir: bool = Field(
        False, description="Start over in an output_dir that holds an earlier run: its metrics.jsonl, samples.jsonl "
        "and checkpoints are deleted first (without it such a folder is refused; a run still training is never "
        "overwritten).")
    unified_checkpoint: bool | None = Field(
        False, description="PaddleNLP unified checkpoint format; ppokit always saves HF-format folders.")
    unified_checkpoint_config: str | None = Field(
        "", description="PaddleNLP unified-checkpoint options; no effect in ppokit.")
    dataloader_drop_last: bool = Field(False, description="Drop the last incomplete prompt batch of an epoch.")
    dataloader_shuffle: bool = Field(True, description="Shuffle the training prompts each epoch.")
    skip_profile_timer: bool | None = Field(True, description="PaddleNLP framework timers; no effect in ppokit.")
    # --- memory and parallelism ---
    recompute: bool = Field(False, description="Gradient checkpointing for the actor.")
    offload_optim: bool | None = Field(False, description="Keep optimizer states on CPU (DeepSpeed offload).")
    sharding: str = Field(
        "", description="DeepSpeed ZeRO stage: '' (none), stage1, stage2 or stage3 (an 'offload' word offloads).")
    sharding_parallel_degree: int = Field(
        -1, description="PaddleNLP sharding group size; ppokit shards over all data-parallel ranks.")
    sharding_parallel_config: str = Field("", description="PaddleNLP sharding options; no effect in ppokit.")
    tensor_parallel_degree: int = Field(
        -1, description="vLLM engine: tensor-parallel size of the rollouts when rollout_tensor_parallel_degree "
        "is -1; -1 -> 1. Training itself is data-parallel with ZeRO (no Megatron tensor parallelism).")
    pipeline_parallel_degree: int = Field(-1, description="PaddleNLP pipeline parallelism; no effect in ppokit.")
    pipeline_parallel_config: str = Field("", description="PaddleNLP pipeline options; no effect in ppokit.")
    sequence_parallel: bool = Field(False, description="PaddleNLP sequence parallelism; no effect in ppokit.")
    release_grads: bool | None = Field(
        False, description="PaddleNLP release of gradients after a step; PyTorch frees them with zero_grad.")
    # --- LlmMetaConfig (PaddleNLP E5+) ---
    use_fused_linear: bool = Field(False, description="PaddleNLP fused linear kernel; no effect in ppokit.")
    use_fused_rope: bool = Field(False, description="PaddleNLP fused rotary-embedding kernel; no effect in ppokit.")
    use_fused_rms_norm: bool = Field(False, description="PaddleNLP fused RMSNorm kernel; no effect in ppokit.")
    use_fused_dropout_add: bool = Field(False, description="PaddleNLP fused dropout+add kernel; no effect in ppokit.")
    use_fused_linear_cross_entropy: bool = Field(
        False, description="PaddleNLP fused linear + cross-entropy kernel; no effect in ppokit.")
    virtual_pp_degree: int = Field(1, description="PaddleNLP virtual pipeline degree; no effect in ppokit.")
    pp_recompute_interval: int = Field(1, description="PaddleNLP pipeline recompute interval; no effect in ppokit.")
    no_recompute_layers: list[int] | None = Field(
        None, description="PaddleNLP layers excluded from recompute; no effect in ppokit.")
    offload_recompute_inputs: bool = Field(
        False, description="PaddleNLP offload of recompute inputs; no effect in ppokit.")

    @field_validator("report_to", "amp_custom_black_list", "amp_custom_white_list", mode="before")
    @classmethod
    def _wrap_scalar(cls, value):
        return [v for v in re.split(r"[\s,]+", value) if v] if isinstance(value, str) else value
