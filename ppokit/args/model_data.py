"""PaddleNLP's ``ModelArgument`` and ``DataArgument`` groups, every key of every version.

Keys renamed across PaddleNLP versions are not fields here: ``translate.py`` maps the old names
(``reward_critic_model_name_or_path``, ``label_key``, ``max_seq_len`` ...) onto these before validation.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

GROUP_CONFIG = ConfigDict(validate_assignment=True, extra="forbid", coerce_numbers_to_str=True)


class ModelArguments(BaseModel):
    """Which models to train and score with (PaddleNLP ``ModelArgument``)."""

    model_config = GROUP_CONFIG

    actor_model_name_or_path: str | None = Field(
        None, description="Policy (actor) model: HF hub name, local folder, .gguf file or alias; "
        "the reference model starts from the same weights.")
    reward_model_name_or_path: str | None = Field(
        None, description="Reward (score) model; for PPO also the critic's initialisation when "
        "critic_model_name_or_path is unset. Unused with use_rm_server or use_rule_reward.")
    critic_model_name_or_path: str | None = Field(
        None, description="Critic (value) model for PPO; None -> initialised from the reward model, "
        "else from the actor (formerly reward_critic_model_name_or_path).")
    reward_server: str | None = Field(
        None, description="URL of the HTTP reward server (PaddleNLP protocol: POST src/tgt/response "
        "lists); required when use_rm_server is true.")
    use_flash_attention: bool = Field(
        False, description="Use flash-attention-2 when installed, else PyTorch SDPA.")
    chat_template: str = Field(
        "none", description="Chat template for `messages` prompts. Not set: the tokenizer's own template (ppokit's "
        "default; PaddleNLP E5+ used prompts verbatim); set to 'none': no template (PaddleNLP's meaning: prompts "
        "verbatim, chat turns as plain 'User:/Assistant:' lines); a folder loads its chat_template.json (or "
        ".jinja), a file its template; the model path keeps the tokenizer's own.")
    recompute_granularity: str = Field(
        "full", description="Actor gradient-checkpointing granularity (full/full_attn/core_attn). Accepted for "
        "PaddleNLP compatibility; no effect here, because transformers checkpoints whole decoder layers.")
    critic_recompute_granularity: str = Field(
        "full", description="Gradient-checkpointing granularity for the critic/reward models. Accepted for "
        "PaddleNLP compatibility; no effect here, because transformers checkpoints whole decoder layers.")
    actor_tokenizer_alpha: float | None = Field(
        None, description="PaddleNLP stochastic tokenisation alpha for the actor tokenizer; no effect in ppokit.")
    reward_tokenizer_alpha: float | None = Field(
        None, description="PaddleNLP stochastic tokenisation alpha for the reward tokenizer; no effect in ppokit.")
    critic_tokenizer_alpha: float | None = Field(
        None, description="PaddleNLP stochastic tokenisation alpha for the critic tokenizer "
        "(formerly reward_critic_tokenizer_alpha); no effect in ppokit.")
    fused_linear: bool = Field(
        True, description="PaddleNLP fused_gemm_epilogue linear layers (E2a-E5); no effect in ppokit.")
    stage: str = Field("PPO", description="Training-stage label (informational only).")
    use_attn_mask_start_row_indices: bool = Field(
        False, description="PaddleNLP flash-mask attention via start-row indices; no effect in ppokit.")


class DataArguments(BaseModel):
    """Where prompts come from and how long they may be (PaddleNLP ``DataArgument``)."""

    model_config = GROUP_CONFIG

    train_datasets: str | None = Field(
        None, description="Training prompts: comma-separated JSON/JSONL paths (src/tgt records); "
        "PaddleNLP's 'Jsonfile::path' spelling is accepted.")
    eval_datasets: str | None = Field(
        None, description="Evaluation prompts, same format as train_datasets.")
    ptx_datasets: str | None = Field(
        None, description="SFT (pretraining-mix, 'ptx') data mixed into the actor loss with weight "
        "ptx_coeff (PaddleNLP E0-E2).")
    train_task_config: str | None = Field(
        None, description="Path to a task-config JSON that generates/locates training prompts "
        "(documented in PaddleNLP's README, implemented by ppokit).")
    eval_task_config: str | None = Field(
        None, description="Path to a task-config JSON for evaluation prompts (README key, implemented by ppokit).")
    ptx_task_config: str | None = Field(
        None, description="Path to a task-config JSON for ptx (SFT) data (README key, implemented by ppokit).")
    eval_split_ratio: float | None = Field(
        None, ge=0.0, lt=1.0,
        description="When eval_datasets is unset, hold out this fraction of the training prompts for evaluation.")
    prompt_key: str = Field("src", description="Record field holding the prompt (user turns).")
    response_key: str = Field(
        "tgt", description="Record field holding the reference answer / assistant turns "
        "(formerly label_key).")
    max_length: int = Field(
        2048, ge=1, description="Max tokens of prompt + response (also the model's position limit); "
        "max_seq_len is an alias.")
    max_prompt_len: int = Field(
        4096, ge=1, description="Max prompt tokens; longer prompts are dropped and counted, never silently cut.")
