"""ppokit's extension keys: what PaddleNLP lacks, named as verl names them where verl has a name."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ppokit.algorithms import POLICY_LOSS_NAMES

from .judge import JudgeArguments
from .model_data import GROUP_CONFIG

KlEstimator = Literal["k1", "k2", "k3", "abs"]
VERL_KL_NAMES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


class PpokitArguments(JudgeArguments):  # the judge's keys live in judge.py
    """Keys ppokit adds (DESIGN.md section 4); PaddleNLP files never contain them."""

    model_config = GROUP_CONFIG

    # --- algorithm ---
    loss_agg_mode: LossAggMode = Field(
        "token-mean", description="How token losses reduce to a scalar over the whole mini-batch.")
    loss_agg_norm_constant: int | None = Field(
        None, ge=1, description="Denominator constant C of seq-mean-token-sum-norm; None -> max_dec_len.")
    norm_adv_by_std_in_grpo: bool = Field(
        True, description="Divide group-relative advantages by the group std (false = Dr.GRPO style).")
    kl_loss_type: KlEstimator = Field(
        "k3", description="KL estimator of the KL loss: k1, k2, k3 or abs (verl's kl/mse/low_var_kl accepted).")
    kl_penalty: KlEstimator = Field(
        "k3", description="KL estimator of the in-reward KL penalty: k1, k2, k3 or abs (verl names accepted).")
    kl_ctrl_type: Literal["fixed", "adaptive"] = Field(
        "fixed", description="In-reward KL coefficient control: fixed kl_coeff or adaptive towards target_kl.")
    target_kl: float = Field(6.0, gt=0.0, description="Target KL of the adaptive KL controller.")
    kl_horizon: int = Field(10000, ge=1, description="Horizon (in sequences) of the adaptive KL controller.")
    clip_ratio_c: float | None = Field(
        None, description="Dual-clip constant c (>1) bounding the loss of negative-advantage tokens; None = off.")
    policy_loss: Literal[POLICY_LOSS_NAMES] = Field(  # the policy-loss table's names
        "vanilla", description="Policy loss: vanilla clipped PPO, gspo (sequence-level ratio) or cispo.")
    rollout_is: Literal["off", "token", "sequence"] = Field(
        "off", description="Truncated importance sampling against the rollout engine's log-probs (rollout-train "
        "mismatch correction, as verl/TRL): token multiplies each token's policy loss by min(pi_old/pi_rollout, "
        "rollout_is_cap), sequence by the capped product over the response; off = no weight. rollout/logprob_diff "
        "is logged either way.")
    rollout_is_cap: float = Field(
        2.0, gt=0.0, description="Truncation cap C of the rollout_is importance weights (verl's default 2).")
    staleness_threshold: int = Field(
        0, ge=0, description="Asynchronous rollouts (verl's async_training.staleness_threshold): batch i is generated "
        "by policy version i - k, k policy versions older than the weights it trains; 0 = the synchronous step; "
        "capped (with a note) at the run's rollout steps - 1, beyond which every batch comes from version 0 already. "
        "The queue of produced batches is saved in checkpoints and consumed first by a resume with any k; stale "
        "samples are corrected by rollout_is (set it to token or sequence). See docs/async.md.")
    async_producer: Literal["inline", "thread"] = Field(
        "inline", description="Where the rollouts of staleness_threshold > 0 are generated: inline (before the "
        "step that needs them) or thread (batch i + k is generated in a thread while batch i trains, on a copy of "
        "the weights; the weight sync waits for it; one process). Both follow the same schedule; no effect when "
        "staleness_threshold is 0.")
    partial_rollout: Literal["finish", "switch"] = Field(
        "finish", description="What rows still being generated do when new weights arrive (async_producer: thread; "
        "verl's async_training.partial_rollout, whose true/false mean switch/finish): finish (the default: they "
        "finish on the weights they started with, so the run repeats to the bit; counted as "
        "async/rows_finished_on_old) or switch (hf engine's decoding loop only: the new weights are copied in "
        "between two tokens and generation continues, the earlier tokens' KV cache kept; each token's policy "
        "version is in the batch's token_version and rollout_is uses the log-probs of the version that sampled "
        "it; async/tokens_from_newer). switch depends on timing unless partial_rollout_token is set. See "
        "docs/async.md.")
    partial_rollout_token: int | None = Field(
        None, ge=1, description="With partial_rollout: switch, the token index (of each decoding batch) at which "
        "generation waits for the new weights and switches, so the switch point and the run repeat to the bit; "
        "None = switch at the first token after the weights are ready (depends on timing). No effect otherwise.")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount factor for GAE / REINFORCE++ returns.")
    lam: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda.")
    critic_warmup_steps: int = Field(
        0, ge=0, description="Rollout steps that train only the critic before the actor starts (PPO, VAPO's "
        "value pretraining; PaddleNLP's pretrain_critic_steps).")
    lam_critic: float | None = Field(
        None, ge=0.0, le=1.0, description="GAE lambda of the critic's return targets (VAPO's decoupled GAE: 1.0); "
        "None -> lam.")
    length_adaptive_alpha: float | None = Field(
        None, gt=0.0, description="VAPO's length-adaptive GAE: the actor's lambda per response of length l is "
        "1 - 1/(alpha l) (VAPO: 0.05); None -> lam for every response.")
    positive_lm_coeff: float = Field(
        0.0, ge=0.0, description="Weight of VAPO's positive-example LM loss (token NLL of the responses whose "
        "score is > 0) added to the actor loss (VAPO: 0.1); 0 = off.")
    # --- LoRA ---
    lora_rank: int = Field(0, ge=0, description="LoRA rank for the actor; 0 = full fine-tuning.")
    lora_alpha: int = Field(16, ge=1, description="LoRA alpha (scale = lora_alpha / lora_rank).")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="LoRA dropout probability.")
    # --- rewards ---
    reward_functions: str | None = Field(
        None, description="Python reward functions 'file.py:fn[,file2.py:fn2]' called as fn(prompts, "
        "responses, **fields).")
    reward_weights: list[float] | None = Field(
        None, description="Weights of the reward sources when several are combined; None = all 1.0.")
    reward_on_error: Literal["raise", "skip_group"] = Field(
        "raise", description="When a reward fails: raise (stop) or skip_group (drop that prompt's group, counted).")
    reward_server_token: str | None = Field(None, description="Bearer token sent to (and required by) the reward server.")
    reward_timeout: float = Field(60.0, gt=0.0, description=(
        "Seconds per reward call: each reward-server request, and each batch call of an in-process reward function "
        "(rule or file.py:fn; run in a worker thread and abandoned when late). Retried reward_max_retries times."))
    reward_max_retries: int = Field(3, ge=0, description="Retries per failed reward-server request or timed-out reward function call before an error.")
    task: str | None = Field(
        None, description="Rule-reward task for records without a 'task' field (knights_knaves, arithmetic, countdown).")
    # --- rollout and evaluation ---
    rollout_engine: Literal["hf", "vllm"] | None = Field(
        None, description="Rollout engine; None -> from use_fusemt (vllm when installed, else hf).")
    gpu_memory_utilization: float = Field(
        0.5, gt=0.0, le=1.0, description="vLLM engine: fraction of each GPU's total memory it may take for its "
        "weights, activations and KV cache while generating (verl's name and default). It sleeps during the "
        "update (KV cache freed, weights moved to CPU), so this share is only needed next to the training state "
        "during rollouts; lower it when the rollout runs out of memory (docs/scaling.md). No effect on the hf engine.")
    top_k: int = Field(
        0, ge=0, description="Top-k sampling; 0 = off (PaddleNLP E0a's top_k defaulted to 1, i.e. greedy).")
    eval_rollout_n: int = Field(1, ge=1, description="Responses per prompt during evaluation.")
    eval_temperature: float = Field(0.0, ge=0.0, description="Sampling temperature during evaluation; 0 = greedy.")
    chunk_size: int = Field(1024, ge=1, description="Tokens per chunk when computing log-probs and entropy.")
    train_data_size: int | None = Field(
        None, ge=1, description="Use only the first N training prompts; None = all.")
    # --- multi-turn tool use (verl: actor_rollout_ref.rollout.multi_turn.*) ---
    multi_turn: bool = Field(
        False, description="Multi-turn rollouts with tool calls (ppokit.rollout.agent_loop): the model generates, "
        "its tool calls run, their results are appended (loss_mask 0) and it continues. Needs tools or "
        "tool_config_path. Rows of verl data without agent_name: tool_agent are multi-turn too when this is on.")
    tools: str | None = Field(
        None, description="Python tool functions 'file.py:multiply,search;other.py:lookup' (a comma between "
        "functions of one file, ';' between files; type hints + docstring give the schema); a bundled task's tools "
        "by name too ('multiply'). Two tools of one name are refused.")
    tool_config_path: str | None = Field(
        None, description="verl tool config YAML: tools: [{class_name, config, tool_schema}], each class with "
        "verl's async create/execute/calc_reward/release.")
    max_assistant_turns: int = Field(
        5, ge=1, description="Model turns per multi-turn rollout; a tool call in the last one is not run.")
    max_tool_response_length: int = Field(
        256, ge=1, description="Characters of a tool result kept before it goes back to the model (verl's "
        "measure; the rest is cut and '...(truncated)' appended).")
    tool_format: Literal["hermes", "qwen", "llama"] = Field(
        "hermes", description="How tool calls are written: hermes '<tool_call>{json}</tool_call>' (Qwen2.5 uses "
        "it too; 'qwen' is the same), llama a bare JSON object {\"name\": ..., \"parameters\": ...}.")
    max_parallel_calls: int = Field(
        1, ge=1, description="Tool calls of one model turn that run (concurrently); later ones get an error text.")
    tool_timeout: float = Field(
        10.0, gt=0.0, description="Seconds one tool call may take; a slower call's result is an error text "
        "(counted in tools/timeouts).")
    # --- run control ---
    resume_from_checkpoint: str | bool | None = Field(
        None, description="Checkpoint folder to resume from, true = the latest in output_dir, None/false = fresh start.")
    force_resume: bool = Field(
        False, description="Resume even when the checkpoint's arguments differ from these (listed as a note).")
    device: str | None = Field(
        None, pattern=r"^(cpu|cuda(:\d+)?)$", description="Device: cpu, cuda or cuda:N; None = cuda when available.")

    @field_validator("kl_loss_type", "kl_penalty", mode="before")
    @classmethod
    def _verl_kl_name(cls, value):
        return VERL_KL_NAMES.get(value, value) if isinstance(value, str) else value

    @field_validator("partial_rollout", mode="before")
    @classmethod
    def _verl_partial_rollout(cls, value):
        """verl's boolean: true = continue running rows on the new weights (switch), false = finish them."""
        words = {"true": "switch", "false": "finish"}
        if isinstance(value, bool):
            return "switch" if value else "finish"
        return words.get(value.lower(), value) if isinstance(value, str) else value

    @field_validator("resume_from_checkpoint", mode="before")
    @classmethod
    def _resume_words(cls, value):
        words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        return words.get(value.lower(), value) if isinstance(value, str) else value

    @field_validator("device", mode="before")
    @classmethod
    def _paddle_gpu(cls, value):
        return "cuda" + value[3:] if isinstance(value, str) and value.startswith("gpu") else value
