"""verl's config tree mapped onto ppokit's arguments, defined once (see docs/verl.md).

Each `VerlKey` holds verl's documented default (``verl/trainer/config/ppo_trainer.yaml``, the 2025
layout), the ppokit key it sets (None: accepted, no effect here), a one-line note where the meaning
differs, a ``convert(value, ctx) -> {ppokit_key: value}`` for mappings that are not one-to-one, and an
``inverse(args) -> value`` used to write a PaddleNLP/ppokit config back as verl overrides.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .extensions import VERL_KL_NAMES

SKIP = object()
"""Returned by an inverse when the key has no value to write."""


@dataclass(frozen=True)
class Ctx:
    """What a converter may look at: the verl values in play (``cfg``) and the data-parallel world size."""

    cfg: dict[str, Any]
    world: int

    def get(self, key: str, default: Any = None) -> Any:
        return self.cfg.get(key, default)


@dataclass(frozen=True)
class VerlKey:
    default: Any
    target: str | None
    note: str = ""
    convert: Callable[[Any, Ctx], dict[str, Any]] | None = None
    inverse: Callable[[Any], Any] | None = None

    def apply(self, value: Any, ctx: Ctx) -> dict[str, Any]:
        if self.convert is not None:
            return self.convert(value, ctx)
        return {} if self.target is None else {self.target: value}

    def invert(self, args: Any) -> Any:
        if self.inverse is not None:
            return self.inverse(args)
        value = getattr(args, self.target) if self.target and self.convert is None else None
        return SKIP if value is None else value


# ------------------------------------------------------------------------------------- converters
def _paths(value, ctx):
    items = value if isinstance(value, list) else [value]
    return ",".join(os.path.expanduser(str(p)) for p in items if p is not None) or None


def _to(target, fn):
    return lambda value, ctx: {target: fn(value, ctx)}


def _unless_null(target, fn=lambda v, ctx: v):
    return lambda value, ctx: {} if value is None else {target: fn(value, ctx)}


def _per_gpu(target, global_key, per_gpu_key):
    """verl's deprecated global micro-batch (divided over the ranks) or its per-GPU one (wins)."""
    def convert(value, ctx):
        per_gpu, total = ctx.get(per_gpu_key), ctx.get(global_key)
        if per_gpu is not None:
            return {target: per_gpu}
        if total is None:
            return {}
        if total % ctx.world:
            raise ConfigError(f"{global_key}={total} (sequences over all GPUs) does not divide over {ctx.world} "
                              f"GPUs; use {per_gpu_key} instead.")
        return {target: max(total // ctx.world, 1)}
    return convert


def _switched(target, use_key, coef_key, default_coef):
    """A coefficient behind an on/off switch: off -> 0; on -> the coefficient (verl's default when not
    given); switch not given (run_ppo.py mode) -> the coefficient if given, else leave the file's value."""
    def convert(value, ctx):
        use, coef = ctx.get(use_key), ctx.get(coef_key)
        if use is False:
            return {target: 0.0}
        if use is True:
            return {target: default_coef if coef is None else coef}
        return {} if coef is None else {target: coef}
    return convert


_kl_loss = _switched("kl_loss_coeff", "actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.actor.kl_loss_coef", 0.001)
_kl_reward = _switched("kl_coeff", "algorithm.use_kl_in_reward", "algorithm.kl_ctrl.kl_coef", 0.001)


ESTIMATORS = {"gae": "ppo", "grpo": "grpo", "rloo": "rloo", "reinforce_plus_plus": "reinforce_plus_plus",
              "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline", "drgrpo": "drgrpo", "dapo": "dapo"}


def _estimator(value, ctx):
    if value not in ESTIMATORS:
        raise ConfigError(f"algorithm.adv_estimator={value!r} is not implemented in ppokit; use one of "
                          f"{', '.join(ESTIMATORS)}.")
    return {"rl_algorithm": ESTIMATORS[value]}


def _rollout_name(value, ctx):
    if value not in ("hf", "vllm"):
        raise ConfigError(f"actor_rollout_ref.rollout.name={value!r}: ppokit rolls out with 'hf' "
                          "(transformers.generate) or 'vllm'.")
    return {"rollout_engine": value}


def _warmup_style(target):
    styles = {"constant": "constant_with_warmup", "cosine": "cosine"}

    def convert(value, ctx):
        if value not in styles:
            raise ConfigError(f"warmup_style={value!r}: use constant or cosine.")
        return {target: styles[value]}
    return convert


def _min_lr(target, lr_key):
    return lambda value, ctx: {} if value is None else {target: float(value) * float(ctx.get(lr_key) or 0.0)}


def _logger(value, ctx):
    names = [value] if isinstance(value, str) else list(value or [])
    kept = [n for n in names if n in ("visualdl", "tensorboard")]
    if "wandb" in names and importlib.util.find_spec("wandb") is not None:
        kept.append("wandb")
    return {"report_to": kept or ["none"]}


def _run_name(value, ctx):
    project, experiment = ctx.get("trainer.project_name"), ctx.get("trainer.experiment_name")
    return {"run_name": "/".join(str(p) for p in (project, experiment) if p)} if (project or experiment) else {}


def _launch(value, ctx):
    return {}  # the launch plan (ppokit.main_ppo) reads n_gpus_per_node x nnodes


LAUNCH_KEYS = ("trainer.nnodes", "trainer.n_gpus_per_node")


def _freq(strategy_key, steps_key):
    def convert(value, ctx):
        if value is None or int(value) <= 0:
            return {strategy_key: "no"}
        return {strategy_key: "steps", steps_key: int(value)}
    return convert


def _resume(value, ctx):
    if value == "disable":
        return {"resume_from_checkpoint": None}
    if value == "resume_path":
        return {"resume_from_checkpoint": ctx.get("trainer.resume_from_path")}
    if value != "auto":
        raise ConfigError(f"trainer.resume_mode={value!r}: use auto, disable or resume_path.")
    folder = os.path.expanduser(str(ctx.get("trainer.default_local_dir") or ""))
    found = os.path.isdir(folder) and any(n.startswith("checkpoint-") for n in os.listdir(folder))
    return {"resume_from_checkpoint": True if found else None}


def _offload(target, word):
    return lambda value, ctx: {target: word} if value else {}


VERL_NAME_OF = {short: name for name, short in VERL_KL_NAMES.items()}


def _kl_name(target):
    return lambda value, ctx: {target: VERL_KL_NAMES.get(value, value)}


def _top_k(value, ctx):
    return {"top_k": max(int(value), 0)}


def _steps(value, ctx):
    return {"max_steps": -1 if value is None else int(value)}


def _lengths(target):
    def convert(value, ctx):
        out = {target: value}
        prompt, response = ctx.get("data.max_prompt_length"), ctx.get("data.max_response_length")
        if prompt is not None and response is not None:
            out["max_length"] = int(prompt) + int(response)
        return out
    return convert


def _reward_model(value, ctx):
    return {"reward_model_name_or_path": os.path.expanduser(str(value))} if ctx.get("reward_model.enable") else {}


def _custom_reward(value, ctx):
    path = ctx.get("custom_reward_function.path")
    name = ctx.get("custom_reward_function.name") or "compute_score"
    return {"reward_functions": f"{os.path.expanduser(str(path))}:{name}"} if path else {}


def _if(target, fn):
    """Inverse reading one ppokit field through ``fn`` (SKIP when fn returns SKIP)."""
    return lambda args: fn(getattr(args, target))


def _none_skip(value):
    return SKIP if value is None else value


_RAY = "ppokit has no Ray: processes are started by ppokit.launch (torchrun) and share one trainer"
_FSDP = "ppokit trains with DeepSpeed ZeRO (sharding), not FSDP"
_KERNEL = "ppokit runs plain PyTorch/transformers kernels"
_DYN = "ppokit batches by sequence count, not by token budget"
_VLLM = "vLLM engine option that ppokit's engine sets itself"
_SHARED = "ppokit trains the critic with the actor's batch sizes and epochs"
A = "actor_rollout_ref."

K = VerlKey
TABLE: dict[str, VerlKey] = {
    # ---- data
    "data.tokenizer": K(None, None, "the tokenizer comes from the model folder"),
    "data.train_files": K("~/data/rlhf/gsm8k/train.parquet", "train_datasets", "one path or a list; parquet, jsonl or json",
                          _to("train_datasets", _paths), _if("train_datasets", _none_skip)),
    "data.val_files": K("~/data/rlhf/gsm8k/test.parquet", "eval_datasets", "evaluated only when trainer.test_freq > 0",
                        _to("eval_datasets", _paths), _if("eval_datasets", _none_skip)),
    "data.prompt_key": K("prompt", "prompt_key", "a chat-message list or a string under this key"),
    "data.reward_fn_key": K("data_source", None, "the default reward always dispatches on data_source"),
    "data.max_prompt_length": K(512, "max_prompt_len", "with max_response_length also sets max_length (their sum)",
                                _lengths("max_prompt_len"), _if("max_prompt_len", lambda v: v)),
    "data.max_response_length": K(512, "max_dec_len", "with max_prompt_length also sets max_length (their sum)",
                                  _lengths("max_dec_len"), _if("max_dec_len", lambda v: v)),
    "data.train_batch_size": K(1024, "global_batch_size", "prompts per rollout step over all GPUs (same unit)"),
    "data.val_batch_size": K(None, None, "deprecated in verl; evaluation batches use per_device_eval_batch_size"),
    "data.return_raw_input_ids": K(False, None, "rewards get the response text"),
    "data.return_raw_chat": K(False, None, "records keep their messages"),
    "data.return_full_prompt": K(False, None, "records keep their messages"),
    "data.shuffle": K(True, "dataloader_shuffle"),
    "data.filter_overlong_prompts": K(False, None, "ppokit always drops prompts over max_prompt_length and counts them"),
    "data.filter_overlong_prompts_workers": K(1, None, "prompts are filtered in process"),
    "data.truncation": K("error", None, "ppokit drops over-long prompts and counts them, never truncates"),
    "data.image_key": K("images", None, "ppokit trains text-only models"),
    "data.video_key": K("videos", None, "ppokit trains text-only models"),
    "data.trust_remote_code": K(False, None, "models load with transformers' built-in classes"),
    "data.custom_cls.path": K(None, None, "ppokit reads rows itself (see docs/data.md)"),
    "data.custom_cls.name": K(None, None, "ppokit reads rows itself (see docs/data.md)"),
    # ---- actor / rollout / reference: model
    A + "hybrid_engine": K(True, None, "the actor always generates its own rollouts here"),
    A + "model.path": K("~/models/deepseek-llm-7b-chat", "actor_model_name_or_path", "",
                        _to("actor_model_name_or_path", lambda v, c: os.path.expanduser(str(v))),
                        _if("actor_model_name_or_path", _none_skip)),
    A + "model.external_lib": K(None, None, "import custom model code yourself (reward_functions files may)"),
    A + "model.override_config": K({}, None, "model configs load unchanged"),
    A + "model.enable_gradient_checkpointing": K(True, "recompute"),
    A + "model.use_remove_padding": K(False, None, "ppokit masks padding with attention masks"),
    A + "model.use_liger": K(False, None, _KERNEL),
    A + "model.use_fused_kernels": K(False, None, _KERNEL),
    A + "model.trust_remote_code": K(False, None, "models load with transformers' built-in classes"),
    A + "model.lora_rank": K(0, "lora_rank"),
    A + "model.lora_alpha": K(16, "lora_alpha"),
    A + "model.target_modules": K("all-linear", None, "ppokit puts LoRA on every attention and MLP projection"),
    # ---- actor: batches and losses
    A + "actor.strategy": K("fsdp", None, _FSDP),
    A + "actor.ppo_mini_batch_size": K(256, "global_mini_batch_size",
                                       "prompts per optimizer step over all GPUs; x rollout.n sequences, as in verl"),
    A + "actor.ppo_micro_batch_size": K(None, "per_device_train_batch_size",
                                        "deprecated: sequences over all GPUs, divided by the GPU count",
                                        _per_gpu("per_device_train_batch_size", A + "actor.ppo_micro_batch_size",
                                                 A + "actor.ppo_micro_batch_size_per_gpu"), lambda a: SKIP),
    A + "actor.ppo_micro_batch_size_per_gpu": K(None, "per_device_train_batch_size", "sequences per GPU per forward",
                                                _per_gpu("per_device_train_batch_size", A + "actor.ppo_micro_batch_size",
                                                         A + "actor.ppo_micro_batch_size_per_gpu"),
                                                _if("per_device_train_batch_size", lambda v: v)),
    A + "actor.use_dynamic_bsz": K(False, None, _DYN),
    A + "actor.ppo_max_token_len_per_gpu": K(16384, None, _DYN),
    A + "actor.grad_clip": K(1.0, "max_grad_norm", "one clip norm for actor and critic"),
    A + "actor.clip_ratio": K(0.2, "clip_range_ratio"),
    A + "actor.clip_ratio_low": K(None, "clip_range_ratio_low", "null -> clip_ratio",
                                  _unless_null("clip_range_ratio_low"), _if("clip_range_ratio_low", _none_skip)),
    A + "actor.clip_ratio_high": K(None, "clip_range_ratio_high", "null -> clip_ratio",
                                   _unless_null("clip_range_ratio_high"), _if("clip_range_ratio_high", _none_skip)),
    A + "actor.clip_ratio_c": K(3.0, "clip_ratio_c", "dual clip; ppokit's own default is off (null)"),
    A + "actor.loss_agg_mode": K("token-mean", "loss_agg_mode",
                                 "denominators span the whole mini-batch (verl's span one micro-batch)"),
    A + "actor.entropy_coeff": K(0.0, "entropy_coeff"),
    A + "actor.use_kl_loss": K(False, "kl_loss_coeff", "false sets kl_loss_coeff=0", _kl_loss,
                               _if("kl_loss_coeff", lambda v: v > 0)),
    A + "actor.kl_loss_coef": K(0.001, "kl_loss_coeff", "applies when use_kl_loss is true", _kl_loss,
                                _if("kl_loss_coeff", lambda v: v if v > 0 else SKIP)),
    A + "actor.kl_loss_type": K("low_var_kl", "kl_loss_type", "verl's kl/mse/low_var_kl are k1/k2/k3",
                                 _kl_name("kl_loss_type"), _if("kl_loss_type", lambda v: VERL_NAME_OF.get(v, v))),
    A + "actor.use_torch_compile": K(True, None, _KERNEL),
    A + "actor.ppo_epochs": K(1, "update_iters", "passes over each rollout batch, as in verl"),
    A + "actor.shuffle": K(False, None, "mini-batches follow the rollout order"),
    A + "actor.ulysses_sequence_parallel_size": K(1, None, "no sequence parallelism in ppokit"),
    A + "actor.policy_loss.loss_mode": K("vanilla", "policy_loss", "vanilla, gspo or cispo"),
    A + "actor.checkpoint.contents": K(["model", "optimizer", "extra"], None,
                                       "checkpoints always hold HF weights, optimizer and run state"),
    A + "actor.optim.lr": K(1e-6, "learning_rate"),
    A + "actor.optim.lr_warmup_steps": K(-1, "warmup_steps", "-1 -> lr_warmup_steps_ratio",
                                         _to("warmup_steps", lambda v, c: max(int(v), 0)),
                                         _if("warmup_steps", lambda v: v if v > 0 else SKIP)),
    A + "actor.optim.lr_warmup_steps_ratio": K(0.0, "warmup_ratio"),
    A + "actor.optim.min_lr_ratio": K(None, "min_learning_rate", "sets min_learning_rate = ratio x lr",
                                      _min_lr("min_learning_rate", A + "actor.optim.lr")),
    A + "actor.optim.warmup_style": K("constant", "lr_scheduler_type", "constant -> constant_with_warmup",
                                      _warmup_style("lr_scheduler_type")),
    A + "actor.optim.total_training_steps": K(-1, None, "derived from max_steps"),
    A + "actor.optim.weight_decay": K(0.01, "weight_decay", "ppokit's own default is 0.0"),
    A + "actor.fsdp_config.param_offload": K(False, "sharding", "true -> ZeRO-3 with optimizer offload",
                                             _offload("sharding", "stage3 offload")),
    A + "actor.fsdp_config.optimizer_offload": K(False, "offload_optim", "", _offload("offload_optim", True)),
    A + "actor.fsdp_config.offload_policy": K(False, None, _FSDP),
    A + "actor.fsdp_config.reshard_after_forward": K(True, None, _FSDP),
    A + "actor.fsdp_config.fsdp_size": K(-1, None, _FSDP),
    A + "actor.fsdp_config.wrap_policy.min_num_params": K(0, None, _FSDP),
    # ---- reference
    A + "ref.strategy": K("fsdp", None, _FSDP),
    A + "ref.fsdp_config.param_offload": K(False, "offload_level", "true -> offload_level freeze_model",
                                           _offload("offload_level", ["freeze_model"])),
    A + "ref.fsdp_config.reshard_after_forward": K(True, None, _FSDP),
    A + "ref.fsdp_config.wrap_policy.min_num_params": K(0, None, _FSDP),
    A + "ref.use_torch_compile": K(True, None, _KERNEL),
    A + "ref.log_prob_micro_batch_size": K(None, "per_device_logprob_batch_size", "deprecated global size / GPUs",
                                           _per_gpu("per_device_logprob_batch_size", A + "ref.log_prob_micro_batch_size",
                                                    A + "ref.log_prob_micro_batch_size_per_gpu")),
    A + "ref.log_prob_micro_batch_size_per_gpu": K(None, "per_device_logprob_batch_size",
                                                   "one size for actor and reference log-probs",
                                                   _per_gpu("per_device_logprob_batch_size",
                                                            A + "ref.log_prob_micro_batch_size",
                                                            A + "ref.log_prob_micro_batch_size_per_gpu")),
    A + "ref.log_prob_use_dynamic_bsz": K(False, None, _DYN),
    A + "ref.log_prob_max_token_len_per_gpu": K(16384, None, _DYN),
    A + "ref.ulysses_sequence_parallel_size": K(1, None, "no sequence parallelism in ppokit"),
    # ---- rollout
    A + "rollout.name": K("vllm", "rollout_engine", "hf or vllm (vllm falls back to hf with a note when absent)",
                          _rollout_name),
    A + "rollout.mode": K("sync", None, "rollouts are synchronous"),
    A + "rollout.temperature": K(1.0, "temperature"),
    A + "rollout.top_k": K(-1, "top_k", "-1 and 0 both mean off", _top_k),
    A + "rollout.top_p": K(1.0, "top_p"),
    A + "rollout.do_sample": K(True, None, "set temperature 0 for greedy rollouts"),
    A + "rollout.use_fire_sampling": K(False, None, "not implemented in ppokit"),
    A + "rollout.prompt_length": K(None, None, "set data.max_prompt_length"),
    A + "rollout.response_length": K(None, None, "set data.max_response_length"),
    A + "rollout.dtype": K("bfloat16", None, "rollouts use the training precision (bf16/fp16)"),
    A + "rollout.gpu_memory_utilization": K(0.5, None, "no ppokit key; the vLLM engine uses its own setting"),
    A + "rollout.ignore_eos": K(False, None, "generation always stops at EOS"),
    A + "rollout.enforce_eager": K(True, None, _VLLM),
    A + "rollout.free_cache_engine": K(True, None, _VLLM),
    A + "rollout.load_format": K("dummy_dtensor", None, _VLLM),
    A + "rollout.tensor_model_parallel_size": K(2, "rollout_tensor_parallel_degree",
                                                "shards the vLLM rollout only; training stays data-parallel"),
    A + "rollout.max_num_batched_tokens": K(8192, None, _VLLM),
    A + "rollout.max_model_len": K(None, None, "the engine uses max_length"),
    A + "rollout.max_num_seqs": K(1024, "rollout_max_num_seqs"),
    A + "rollout.log_prob_micro_batch_size": K(None, "per_device_logprob_batch_size", "deprecated global size / GPUs",
                                               _per_gpu("per_device_logprob_batch_size",
                                                        A + "rollout.log_prob_micro_batch_size",
                                                        A + "rollout.log_prob_micro_batch_size_per_gpu")),
    A + "rollout.log_prob_micro_batch_size_per_gpu": K(None, "per_device_logprob_batch_size",
                                                       "one size for actor and reference log-probs",
                                                       _per_gpu("per_device_logprob_batch_size",
                                                                A + "rollout.log_prob_micro_batch_size",
                                                                A + "rollout.log_prob_micro_batch_size_per_gpu"),
                                                       _if("per_device_logprob_batch_size", lambda v: v)),
    A + "rollout.log_prob_use_dynamic_bsz": K(False, None, _DYN),
    A + "rollout.log_prob_max_token_len_per_gpu": K(16384, None, _DYN),
    A + "rollout.disable_log_stats": K(True, None, _VLLM),
    A + "rollout.enable_chunked_prefill": K(True, None, _VLLM),
    A + "rollout.n": K(1, "rollout_n", "responses per prompt"),
    A + "rollout.engine_kwargs.swap_space": K(None, None, _VLLM),
    A + "rollout.val_kwargs.top_k": K(-1, None, "evaluation samples with top_k/top_p of training"),
    A + "rollout.val_kwargs.top_p": K(1.0, None, "evaluation samples with top_k/top_p of training"),
    A + "rollout.val_kwargs.temperature": K(0.0, "eval_temperature"),
    A + "rollout.val_kwargs.n": K(1, "eval_rollout_n"),
    A + "rollout.val_kwargs.do_sample": K(False, None, "eval_temperature 0 means greedy"),
    A + "rollout.multi_turn.enable": K(False, None, "ppokit rolls out single-turn responses"),
    A + "rollout.multi_turn.max_turns": K(None, None, "ppokit rolls out single-turn responses"),
    A + "rollout.multi_turn.tool_config_path": K(None, None, "ppokit rolls out single-turn responses"),
    A + "rollout.multi_turn.format": K("chatml", None, "ppokit rolls out single-turn responses"),
}

C = "critic."
TABLE.update({
    C + "rollout_n": K(None, None, "follows actor_rollout_ref.rollout.n"),
    C + "strategy": K("fsdp", None, _FSDP),
    C + "optim.lr": K(1e-5, "critic_learning_rate"),
    C + "optim.lr_warmup_steps": K(-1, None, "the critic warms up by critic.optim.lr_warmup_steps_ratio"),
    C + "optim.lr_warmup_steps_ratio": K(0.0, "critic_warmup_ratio"),
    C + "optim.min_lr_ratio": K(None, "critic_min_learning_rate", "sets critic_min_learning_rate = ratio x lr",
                                _min_lr("critic_min_learning_rate", C + "optim.lr")),
    C + "optim.warmup_style": K("constant", "critic_lr_scheduler_type", "constant -> constant_with_warmup",
                                _warmup_style("critic_lr_scheduler_type")),
    C + "optim.total_training_steps": K(-1, None, "derived from max_steps"),
    C + "optim.weight_decay": K(0.01, "critic_weight_decay"),
    C + "model.path": K("~/models/deepseek-llm-7b-chat", "critic_model_name_or_path", "",
                        _to("critic_model_name_or_path", lambda v, c: os.path.expanduser(str(v))),
                        _if("critic_model_name_or_path", _none_skip)),
    C + "model.tokenizer_path": K(None, None, "the critic uses its model folder's tokenizer"),
    C + "model.override_config": K({}, None, "model configs load unchanged"),
    C + "model.external_lib": K(None, None, "import custom model code yourself"),
    C + "model.enable_gradient_checkpointing": K(True, "critic_recompute"),
    C + "model.use_remove_padding": K(False, None, "ppokit masks padding with attention masks"),
    C + "model.trust_remote_code": K(False, None, "models load with transformers' built-in classes"),
    C + "model.fsdp_config.param_offload": K(False, None, "the critic follows the actor's ZeRO settings"),
    C + "model.fsdp_config.optimizer_offload": K(False, None, "the critic follows the actor's ZeRO settings"),
    C + "model.fsdp_config.offload_policy": K(False, None, _FSDP),
    C + "model.fsdp_config.reshard_after_forward": K(True, None, _FSDP),
    C + "model.fsdp_config.wrap_policy.min_num_params": K(0, None, _FSDP),
    C + "model.fsdp_config.fsdp_size": K(-1, None, _FSDP),
    C + "ppo_mini_batch_size": K(None, None, _SHARED),
    C + "ppo_micro_batch_size": K(None, None, _SHARED),
    C + "ppo_micro_batch_size_per_gpu": K(None, None, _SHARED),
    C + "forward_micro_batch_size": K(None, "per_device_value_batch_size", "deprecated global size / GPUs",
                                      _per_gpu("per_device_value_batch_size", C + "forward_micro_batch_size",
                                               C + "forward_micro_batch_size_per_gpu")),
    C + "forward_micro_batch_size_per_gpu": K(None, "per_device_value_batch_size", "sequences per value forward",
                                              _per_gpu("per_device_value_batch_size", C + "forward_micro_batch_size",
                                                       C + "forward_micro_batch_size_per_gpu")),
    C + "use_dynamic_bsz": K(False, None, _DYN),
    C + "ppo_max_token_len_per_gpu": K(32768, None, _DYN),
    C + "forward_max_token_len_per_gpu": K(32768, None, _DYN),
    C + "ulysses_sequence_parallel_size": K(1, None, "no sequence parallelism in ppokit"),
    C + "ppo_epochs": K(None, None, _SHARED),
    C + "shuffle": K(False, None, "mini-batches follow the rollout order"),
    C + "grad_clip": K(1.0, None, "actor and critic share max_grad_norm (actor_rollout_ref.actor.grad_clip)"),
    C + "cliprange_value": K(0.5, "clip_range_value", "ppokit's own default is 5.0"),
    C + "checkpoint.contents": K(["model", "optimizer", "extra"], None,
                                 "checkpoints always hold HF weights, optimizer and run state"),
    # ---- reward
    "reward_model.enable": K(False, None, "true uses reward_model.model.path", lambda v, c: {}),
    "reward_model.strategy": K("fsdp", None, _FSDP),
    "reward_model.model.input_tokenizer": K(None, None, "the reward model reads the response text"),
    "reward_model.model.path": K("~/models/FsfairX-LLaMA3-RM-v0.1", "reward_model_name_or_path",
                                 "only when reward_model.enable is true", _reward_model,
                                 _if("reward_model_name_or_path", _none_skip)),
    "reward_model.model.external_lib": K(None, None, "import custom model code yourself"),
    "reward_model.model.use_remove_padding": K(False, None, "ppokit masks padding with attention masks"),
    "reward_model.model.trust_remote_code": K(False, None, "models load with transformers' built-in classes"),
    "reward_model.model.fsdp_config.param_offload": K(False, None, _FSDP),
    "reward_model.model.fsdp_config.reshard_after_forward": K(True, None, _FSDP),
    "reward_model.model.fsdp_config.wrap_policy.min_num_params": K(0, None, _FSDP),
    "reward_model.model.fsdp_config.fsdp_size": K(-1, None, _FSDP),
    "reward_model.micro_batch_size": K(None, "per_device_reward_batch_size", "deprecated global size / GPUs",
                                       _per_gpu("per_device_reward_batch_size", "reward_model.micro_batch_size",
                                                "reward_model.micro_batch_size_per_gpu")),
    "reward_model.micro_batch_size_per_gpu": K(None, "per_device_reward_batch_size", "",
                                               _per_gpu("per_device_reward_batch_size", "reward_model.micro_batch_size",
                                                        "reward_model.micro_batch_size_per_gpu")),
    "reward_model.max_length": K(None, None, "the reward model reads up to max_length tokens"),
    "reward_model.ulysses_sequence_parallel_size": K(1, None, "no sequence parallelism in ppokit"),
    "reward_model.use_dynamic_bsz": K(False, None, _DYN),
    "reward_model.forward_max_token_len_per_gpu": K(32768, None, _DYN),
    "reward_model.reward_manager": K("naive", None, "rewards are computed batch-wise in process"),
    "reward_model.launch_reward_fn_async": K(False, None, "rewards run in process after each rollout"),
    "custom_reward_function.path": K(None, "reward_functions", "path:name; verl's compute_score(data_source, "
                                     "solution_str, ground_truth, extra_info) signature is called per item",
                                     _custom_reward),
    "custom_reward_function.name": K("compute_score", "reward_functions", "", _custom_reward),
    # ---- algorithm
    "algorithm.gamma": K(1.0, "gamma"),
    "algorithm.lam": K(1.0, "lam", "ppokit's own default is 0.95"),
    "algorithm.adv_estimator": K("gae", "rl_algorithm", "gae -> ppo; grpo, rloo, reinforce_plus_plus(_baseline) "
                                 "keep their names", _estimator,
                                 _if("rl_algorithm", lambda v: {"ppo": "gae"}.get(v, v))),
    "algorithm.norm_adv_by_std_in_grpo": K(True, "norm_adv_by_std_in_grpo"),
    "algorithm.use_kl_in_reward": K(False, "kl_coeff", "false sets kl_coeff=0; ppokit puts KL in the reward only "
                                    "for ppo and reinforce_plus_plus(_baseline)", _kl_reward,
                                    _if("kl_coeff", lambda v: v > 0)),
    "algorithm.kl_penalty": K("kl", "kl_penalty", "verl's kl/mse/low_var_kl are k1/k2/k3", _kl_name("kl_penalty"),
                              _if("kl_penalty", lambda v: VERL_NAME_OF.get(v, v))),
    "algorithm.kl_ctrl.type": K("fixed", "kl_ctrl_type"),
    "algorithm.kl_ctrl.kl_coef": K(0.001, "kl_coeff", "applies when use_kl_in_reward is true", _kl_reward,
                                   _if("kl_coeff", lambda v: v if v > 0 else SKIP)),
    "algorithm.kl_ctrl.horizon": K(10000, "kl_horizon"),
    "algorithm.kl_ctrl.target_kl": K(0.1, "target_kl"),
    # ---- trainer
    "trainer.balance_batch": K(True, "balance_batch"),
    "trainer.total_epochs": K(30, "num_train_epochs", "used when total_training_steps is null"),
    "trainer.total_training_steps": K(None, "max_steps", "rollout steps, as in verl", _steps,
                                      _if("max_steps", lambda v: v if v > 0 else SKIP)),
    "trainer.project_name": K("verl_examples", "run_name", "run_name = project_name/experiment_name", _run_name),
    "trainer.experiment_name": K("gsm8k", "run_name", "run_name = project_name/experiment_name", _run_name),
    "trainer.logger": K(["console", "wandb"], "report_to", "console and JSONL are always on; visualdl, "
                        "tensorboard and (installed) wandb are kept; mlflow, swanlab and others are dropped", _logger),
    "trainer.log_val_generations": K(0, None, "evaluation writes its samples to the output folder"),
    "trainer.rollout_data_dir": K(None, None, "rollout samples go to the output folder"),
    "trainer.validation_data_dir": K(None, None, "evaluation samples go to the output folder"),
    "trainer.nnodes": K(1, None, "with n_gpus_per_node, the launch plan (processes = nnodes x n_gpus_per_node)",
                        _launch),
    "trainer.n_gpus_per_node": K(8, None, "the launch plan: ppokit.main_ppo starts this many processes", _launch),
    "trainer.save_freq": K(-1, "save_steps", "-1 -> save_strategy no", _freq("save_strategy", "save_steps"),
                           lambda a: a.save_steps if a.save_strategy == "steps" else -1),
    "trainer.resume_mode": K("auto", "resume_from_checkpoint", "auto resumes when default_local_dir has a "
                             "checkpoint", _resume),
    "trainer.resume_from_path": K(None, None, "used by resume_mode=resume_path"),
    "trainer.val_before_train": K(True, None, "ppokit evaluates every test_freq steps, not before training"),
    "trainer.test_freq": K(-1, "eval_steps", "-1 -> evaluation_strategy no", _freq("evaluation_strategy", "eval_steps"),
                           lambda a: a.eval_steps if a.evaluation_strategy == "steps" and a.eval_steps else -1),
    "trainer.critic_warmup": K(0, "critic_warmup_steps"),
    "trainer.default_hdfs_dir": K(None, None, "checkpoints are written to default_local_dir only"),
    "trainer.del_local_ckpt_after_load": K(False, None, "checkpoints are kept"),
    "trainer.default_local_dir": K("checkpoints/verl_examples/gsm8k", "output_dir", "",
                                   _to("output_dir", lambda v, c: os.path.expanduser(str(v))), lambda a: a.output_dir),
    "trainer.max_actor_ckpt_to_keep": K(None, "save_total_limit", "one limit for all checkpoints",
                                        _unless_null("save_total_limit"), _if("save_total_limit", _none_skip)),
    "trainer.max_critic_ckpt_to_keep": K(None, None, "follows max_actor_ckpt_to_keep"),
    "trainer.ray_wait_register_center_timeout": K(300, None, _RAY),
    "trainer.device": K(None, "device", "null -> cuda when available, else cpu", _unless_null("device"),
                        _if("device", _none_skip)),
    "ray_init.num_cpus": K(None, None, _RAY),
    "ray_init.timeline_json_file": K(None, None, _RAY),
})

INTERPOLATED = {
    C + "rollout_n": "${actor_rollout_ref.rollout.n}",
    C + "model.tokenizer_path": "${actor_rollout_ref.model.path}",
    C + "ppo_mini_batch_size": "${actor_rollout_ref.actor.ppo_mini_batch_size}",
    C + "ppo_epochs": "${actor_rollout_ref.actor.ppo_epochs}",
    C + "forward_micro_batch_size": "${critic.ppo_micro_batch_size}",
    C + "forward_micro_batch_size_per_gpu": "${critic.ppo_micro_batch_size_per_gpu}",
    A + "rollout.prompt_length": "${data.max_prompt_length}",
    A + "rollout.response_length": "${data.max_response_length}",
    "trainer.default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
}
"""Defaults verl writes as interpolations of other keys (whole-value ones are resolved; the output folder
is formatted from project and experiment names)."""

FREE_FORM = frozenset({A + "model.override_config", C + "model.override_config", A + "rollout.engine_kwargs"})
"""Mappings whose sub-keys are the user's own (accepted with a note, no effect)."""

MISSPELLED_PREFIXES = {"actor_rollout.ref.": A}
"""Prefixes from widely copied guides, read as the right key with a warning."""
