"""The RL fields of PaddleNLP's ``TrainingArguments`` subclass (``config_utils.py``), all versions."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from ppokit.algorithms import ALGORITHM_NAMES

from .model_data import GROUP_CONFIG

RlAlgorithm = Literal[ALGORITHM_NAMES]  # the names of the algorithm table, in its order


class RLTrainingArguments(BaseModel):
    """Algorithm, rollout and batch-size keys of PaddleNLP's RL TrainingArguments."""

    model_config = GROUP_CONFIG

    rl_algorithm: RlAlgorithm = Field(
        "ppo", description="ppo (actor + critic, GAE), grpo, reinforce_plus_plus, vapo (PaddleNLP; vapo = PPO "
        "with a pretrained critic, decoupled length-adaptive GAE, clip-higher, token-level and positive-example "
        "LM losses) or ppokit's rloo, drgrpo, dapo, reinforce_plus_plus_baseline.")
    # --- batch sizes: global mode (PaddleNLP E5+) ---
    global_batch_size: int = Field(
        8, ge=1, description="Prompts per rollout step over all ranks (sequences = global_batch_size x "
        "rollout_n); when set, batch sizes follow the global rules, else the per-device ones.")
    global_mini_batch_size: int = Field(
        -1, description="Global prompts per optimizer step; <0 -> global_batch_size (formerly mini_batch_size).")
    global_gen_batch_size: int = Field(
        -1, description="Prompts generated per round under dynamic_sampling; <=0 or no dynamic_sampling "
        "-> global_batch_size.")
    rollout_n: int = Field(
        1, ge=1, description="Responses sampled per prompt (formerly num_return_sequences).")
    update_iters: int = Field(
        1, ge=1, description="Passes over each rollout batch, each pass walking it in mini-batches "
        "with one optimizer step per mini-batch.")
    # --- batch sizes: per-device mode (PaddleNLP E0-E4) ---
    per_device_prompt_batch_size: int = Field(
        16, ge=1, description="Per-device mode: prompts per rank per rollout step (ignored when "
        "global_batch_size is set, as in PaddleNLP E5+).")
    per_device_sample_batch_size: int = Field(
        16, ge=1, description="Per-device mode with dynamic_sampling (PaddleNLP E4b): valid prompts per "
        "rank needed per step; global mode uses global_batch_size instead.")
    per_device_train_batch_size: int = Field(
        1, ge=1, description="Training micro-batch: sequences per rank per forward/backward "
        "(PaddleNLP E0-E4 base default was 8).")
    per_device_rollout_batch_size: int = Field(
        -1, description="Prompts per generation call per rank; <=0 -> global_batch_size // world_size "
        "(global mode) or per_device_train_batch_size (per-device mode).")
    per_device_logprob_batch_size: int = Field(
        -1, description="Sequences per log-prob forward pass; <=0 -> per_device_train_batch_size "
        "(formerly rollout_logprob_batch_size).")
    per_device_reward_batch_size: int = Field(
        -1, description="Sequences per reward-model forward pass; <=0 -> per_device_train_batch_size.")
    per_device_value_batch_size: int = Field(
        -1, description="Sequences per critic value forward pass; <=0 -> per_device_train_batch_size.")
    rollout_max_num_seqs: int = Field(
        8, ge=1, description="vLLM engine: max sequences decoded at once per tensor-parallel group (vLLM's "
        "max_num_seqs). Unset: 256, vLLM's own default (PaddleNLP's 8 leaves a GPU idle); set, as given. No effect "
        "on the hf engine.")
    rollout_tensor_parallel_degree: int = Field(
        -1, description="vLLM engine: tensor-parallel size (GPUs per rollout engine; it must divide the GPUs per "
        "node); each group of that many consecutive ranks generates its ranks' prompts together. "
        "-1 -> tensor_parallel_degree. No effect on the hf engine.")
    rollout_quant_type: str = Field(
        "", description="PaddleNLP rollout weight quantisation (e.g. weight_only_int8; formerly quant_type); "
        "no effect in ppokit.")
    # --- generation ---
    max_dec_len: int = Field(512, ge=1, description="Max generated (response) tokens.")
    min_dec_len: int = Field(1, ge=0, description="Min generated tokens before EOS is allowed.")
    max_src_len: int = Field(
        3072, ge=1, description="Generator's max source length; overwritten from max_prompt_len (as PaddleNLP does).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature for rollouts.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus-sampling p; 1.0 = off.")
    repetition_penalty: float = Field(1.0, gt=0.0, description="Generation repetition penalty; 1.0 = none.")
    eos_token: str = Field("", description="Extra end-of-sequence token string for generation; '' = none.")
    use_fusemt: bool = Field(
        True, description="Fast generation path: the vLLM engine when installed, else transformers "
        "generate with a one-time note.")
    # --- rewards ---
    use_rm_server: bool = Field(
        False, description="Score responses with the HTTP reward server at reward_server (labels are read).")
    use_rule_reward: bool = Field(
        False, description="Score responses with the built-in rule reward of each record's task "
        "(no reward model loaded; labels are read).")
    clip_range_score: float = Field(10.0, gt=0.0, description="Rewards are clipped to [-clip_range_score, +clip_range_score].")
    normalize_reward: bool | None = Field(
        None, description="Normalise rewards over the batch; forced off for grpo/drgrpo/dapo/rloo.")
    normalize_advantage: bool | None = Field(
        None, description="Whiten advantages over the batch; forced off for grpo/drgrpo/dapo/rloo.")
    enable_overlong_reward_buffer: bool = Field(
        False, description="DAPO overlong penalty for responses reaching the last overlong_reward_buffer "
        "tokens before max_dec_len.")
    overlong_reward_buffer: int = Field(
        256, ge=1, description="Length (tokens) of the soft overlong-penalty buffer; when overlong shaping is on "
        "and this is unset, a fifth of max_dec_len (verl's DAPO recipe) instead of PaddleNLP's fixed 256.")
    overlong_penalty_factor: float = Field(1.0, description="Scale of the overlong penalty added to the reward.")
    dynamic_sampling: bool = Field(
        False, description="DAPO dynamic sampling: drop groups with zero reward variance and generate "
        "more until the batch is full.")
    max_gen_batches: int = Field(
        32, description="Max generation rounds per step under dynamic_sampling before an error (<=0 = unlimited).")
    # --- losses ---
    clip_range_ratio: float = Field(0.2, gt=0.0, description="PPO ratio clip epsilon.")
    clip_range_ratio_low: float | None = Field(
        None, description="Lower ratio clip (DAPO clip-higher); None -> clip_range_ratio.")
    clip_range_ratio_high: float | None = Field(
        None, description="Upper ratio clip (DAPO clip-higher); None -> clip_range_ratio.")
    clip_range_value: float = Field(5.0, gt=0.0, description="Value-function clip range around the old value.")
    kl_coeff: float = Field(
        0.02, ge=0.0, description="beta of the KL penalty put into the reward (ppo, reinforce_plus_plus*).")
    kl_loss_coeff: float = Field(
        0.001, ge=0.0, description="Weight of the KL loss added to the policy loss (GRPO-style); 0 = off.")
    pg_loss_coeff: float = Field(1.0, description="Weight of the policy-gradient loss.")
    entropy_coeff: float = Field(0.0, description="Weight of the entropy bonus (subtracted from the loss).")
    ptx_coeff: float = Field(0.0, ge=0.0, description="Weight of the SFT (ptx) loss on ptx data; 0 = off.")
    use_fp32_compute: bool = Field(
        False, description="Compute log-probs, rewards, advantages and losses in float32. Accepted for PaddleNLP "
        "compatibility; no effect here, because ppokit always computes them in float32.")
    use_tgt_len_value: bool = Field(
        False, description="PaddleNLP compatibility switch (target-length value); no effect in ppokit.")
    # --- critic optimiser (copied onto the critic without the critic_ prefix) ---
    critic_learning_rate: float | None = Field(None, description="Critic learning rate; None -> learning_rate.")
    critic_weight_decay: float | None = Field(None, description="Critic weight decay; None -> weight_decay.")
    critic_lr_scheduler_type: str | None = Field(None, description="Critic LR scheduler; None -> lr_scheduler_type.")
    critic_warmup_ratio: float | None = Field(None, description="Critic warmup ratio; None -> warmup_ratio.")
    critic_recompute: bool | None = Field(
        None, description="Gradient checkpointing for critic/reward models; None -> recompute.")
    critic_min_learning_rate: float | None = Field(
        None, description="Critic min learning rate; None -> min_learning_rate (PaddleNLP never applied it; ppokit does).")
    critic_decay_steps: int | None = Field(
        None, description="Critic LR decay horizon; None -> decay_steps (PaddleNLP never applied it; ppokit does).")
    min_learning_rate: float | None = Field(
        None, description="With cosine/linear: warm up, then decay from learning_rate to this over decay_steps.")
    decay_steps: int | None = Field(None, description="Decay horizon of the min_learning_rate scheduler, in rollout steps like "
                                        "max_steps; None -> max_steps.")
    # --- misc PaddleNLP RL keys ---
    eval_mode: str | None = Field(
        None, description="PaddleNLP eval-model layout (single/tensor_parallel; '' -> None); ppokit "
        "evaluates with the training actor.")
    offload_level: list[str] = Field(
        default_factory=list, description="What to offload to CPU between phases: space-separated "
        "string or list of freeze_model, optimizer, train_model.")
    balance_batch: bool = Field(
        False, description="Rebalance sequences across data-parallel ranks by token count after rollout. Accepted "
        "for PaddleNLP compatibility; no effect here, because each rank trains on the prompts it generated for "
        "(losses use the global token counts, so the gradient is the same; only speed could differ).")
    tensor_parallel_output: bool = Field(
        True, description="PaddleNLP: keep logits split across tensor-parallel ranks; no effect in ppokit.")
    use_fused_head_and_loss_fn: bool = Field(
        False, description="PaddleNLP fused LM head + loss; ppokit chunks log-probs instead (chunk_size).")
    use_remove_padding: bool = Field(
        False, description="PaddleNLP varlen (padding-free) training forward; no effect in ppokit.")
    recompute_use_reentrant: bool = Field(
        True, description="Re-entrant activation checkpointing (torch use_reentrant) when recompute is on. "
        "Applied when set explicitly; not set, ppokit uses non-reentrant checkpointing (PaddleNLP's default is "
        "true), which works with LoRA over frozen inputs and ZeRO-3.")
    autotuner_benchmark: bool = Field(
        False, description="PaddleNLP benchmark mode (5 steps, random weights); no effect in ppokit.")
    hidden_dropout_prob: float = Field(
        0.0, ge=0.0, lt=1.0, description="Hidden dropout probability of the trained models (actor, critic), set in "
        "their config and modules; a note says when an architecture (e.g. Llama, Qwen2) has no hidden dropout.")
    attention_probs_dropout_prob: float = Field(
        0.0, ge=0.0, lt=1.0, description="Attention dropout probability of the trained models (actor, critic), "
        "set in their config and attention modules.")
    dropout_warmup_steps: int = Field(
        0, description="PaddleNLP dropout warm-up (declared, never used there); no effect in ppokit.")
    early_stopping: bool = Field(
        False, description="Stop when the eval metric stops improving. Accepted for PaddleNLP compatibility; no "
        "effect here, because ppokit trains to max_steps (num_train_epochs); stop a run and resume it instead.")
    early_stopping_patience: int = Field(
        4, ge=1, description="Evaluations without improvement before stopping. Accepted for PaddleNLP "
        "compatibility; no effect here, because ppokit has no early stopping (see early_stopping).")
    early_stopping_threshold: float = Field(
        0.0, ge=0.0, description="Minimum improvement that resets patience. Accepted for PaddleNLP compatibility; "
        "no effect here, because ppokit has no early stopping (see early_stopping).")

    @field_validator("offload_level", mode="before")
    @classmethod
    def _split_offload_level(cls, value):
        if value is None:
            return []
        return value.split() if isinstance(value, str) else value

    @field_validator("eval_mode", mode="before")
    @classmethod
    def _empty_eval_mode(cls, value):
        return None if value == "" else value
