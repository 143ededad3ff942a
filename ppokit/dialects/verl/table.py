"""verl's config tree mapped onto ppokit's arguments, defined once (see docs/verl.md).

Each `VerlKey` holds verl's documented default (``verl/trainer/config/ppo_trainer.yaml``, the 2025
layout), the ppokit key it sets (None: accepted, no effect here), a one-line note where the meaning
differs, a ``convert(value, ctx) -> {ppokit_key: value}`` for mappings that are not one-to-one, and an
``inverse(args) -> value`` used to write a PaddleNLP/ppokit config back as verl overrides.
"""

from __future__ import annotations

import fnmatch
import os
from typing import NamedTuple

from ppokit.algorithms import ALGORITHMS

from .convert import (  # noqa: F401  (SKIP, Ctx, VerlKey are re-exported for callers of the table)
    LAUNCH_KEYS,
    SKIP,
    VERL_NAME_OF,
    Ctx,
    Rule,
    VerlKey,
    _betas,
    _custom_reward,
    _device,
    _estimator,
    _freq,
    _grad_clip,
    _if,
    _kl_loss,
    _kl_name,
    _kl_reward,
    _launch,
    _lengths,
    _logger,
    _max_samples,
    _min_lr,
    _none_skip,
    _offload,
    _paths,
    _per_gpu,
    _resume,
    _reward_model,
    _rollout_is,
    _rollout_name,
    _run_name,
    _steps,
    _switched,
    _to,
    _top_k,
    _unless_null,
    _val_files,
    _warmup_style,
)
from .eras import VERSIONS
from .eras import leaves as era_leaves
from .multi_turn import MULTI_TURN_KEYS, M
from .rules import _DYN, _FSDP, _KERNEL, _RAY, _SHARED, _VLLM, RULES, A


def _plan(args):
    """The batch plan of ``args`` on the launcher's world size (per-device files are written in global units)."""
    from ppokit.args.batch import batch_plan
    from ppokit.args.loader import env_world_size

    return batch_plan(args, env_world_size())


K = VerlKey
TABLE: dict[str, VerlKey] = {
    # ---- data
    "data.tokenizer": K(None, None, "the tokenizer comes from the model folder"),
    "data.train_files": K("~/data/rlhf/gsm8k/train.parquet", "train_datasets", "one path or a list; parquet, jsonl or json",
                          _to("train_datasets", _paths), _if("train_datasets", _none_skip)),
    "data.val_files": K("~/data/rlhf/gsm8k/test.parquet", "eval_datasets", "read and evaluated only when "
                        "trainer.test_freq > 0", _val_files, _if("eval_datasets", _none_skip)),
    "data.prompt_key": K("prompt", "prompt_key", "a chat-message list or a string under this key"),
    "data.reward_fn_key": K("data_source", None, "the default reward always dispatches on data_source"),
    "data.max_prompt_length": K(512, "max_prompt_len", "with max_response_length also sets max_length (their sum)",
                                _lengths("max_prompt_len"), _if("max_prompt_len", lambda v: v)),
    "data.max_response_length": K(512, "max_dec_len", "with max_prompt_length also sets max_length (their sum)",
                                  _lengths("max_dec_len"), _if("max_dec_len", lambda v: v)),
    "data.train_batch_size": K(1024, "global_batch_size", "prompts per rollout step over all GPUs (same unit)",
                               inverse=lambda a: _plan(a).prompts_per_step),
    "data.val_batch_size": K(None, None, "deprecated in verl; evaluation batches use per_device_eval_batch_size"),
    "data.return_raw_input_ids": K(False, None, "rewards get the response text"),
    "data.return_raw_chat": K(False, None, "records keep their messages"),
    "data.return_full_prompt": K(False, None, "records keep their messages"),
    "data.shuffle": K(True, "dataloader_shuffle"),
    "data.train_max_samples": K(-1, "train_data_size", "-1 -> all prompts", _max_samples,
                                lambda a: -1 if a.train_data_size is None else a.train_data_size),
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
                                       "prompts per optimizer step over all GPUs; x rollout.n sequences, as in verl",
                                       inverse=lambda a: _plan(a).mini_batch_prompts),
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
    A + "actor.grad_clip": K(1.0, "max_grad_norm", "one clip norm for actor and critic", _grad_clip,
                             _if("max_grad_norm", lambda v: v)),
    A + "actor.optim.clip_grad": K(1.0, "max_grad_norm", "the Megatron trainer's (and verl 0.7's) name of actor.grad_clip", _grad_clip,
                                   lambda a: SKIP),
    A + "actor.optim.betas": K([0.9, 0.999], "adam_beta1", "sets adam_beta1 and adam_beta2", _betas,
                               lambda a: [a.adam_beta1, a.adam_beta2]),
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
                                         _unless_null("warmup_steps", lambda v, c: max(int(v), 0)),
                                         _if("warmup_steps", lambda v: v if v > 0 else SKIP)),
    A + "actor.optim.lr_warmup_steps_ratio": K(0.0, "warmup_ratio"),
    A + "actor.optim.min_lr_ratio": K(None, "min_learning_rate", "sets min_learning_rate = ratio x lr",
                                      _min_lr("min_learning_rate", A + "actor.optim.lr")),
    A + "actor.optim.warmup_style": K("constant", "lr_scheduler_type", "constant -> constant_with_warmup",
                                      _warmup_style("lr_scheduler_type", A + "actor.optim."),
                                      lambda a: SKIP),
    A + "actor.optim.lr_scheduler_type": K("constant", "lr_scheduler_type", "constant -> constant_with_warmup "
                                           "(verl 0.6's name of warmup_style)",
                                           _warmup_style("lr_scheduler_type", A + "actor.optim."),
                                           lambda a: SKIP),
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
    A + "rollout.gpu_memory_utilization": K(0.5, "gpu_memory_utilization"),
    A + "rollout.ignore_eos": K(False, None, "generation always stops at EOS"),
    A + "rollout.enforce_eager": K(True, None, _VLLM),
    A + "rollout.free_cache_engine": K(True, None, _VLLM),
    A + "rollout.load_format": K("dummy_dtensor", None, _VLLM),
    A + "rollout.tensor_model_parallel_size": K(2, "rollout_tensor_parallel_degree",
                                                "shards the vLLM rollout only; training stays data-parallel"),
    A + "rollout.max_num_batched_tokens": K(8192, None, _VLLM),
    A + "rollout.max_model_len": K(None, None, "the engine uses max_prompt_len + max_dec_len"),
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
                                _warmup_style("critic_lr_scheduler_type", C + "optim."), lambda a: SKIP),
    C + "optim.lr_scheduler_type": K("constant", "critic_lr_scheduler_type", "constant -> constant_with_warmup "
                                     "(verl 0.6's name of warmup_style)",
                                     _warmup_style("critic_lr_scheduler_type", C + "optim."),
                                     lambda a: SKIP),
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
                                 _if("rl_algorithm", lambda v: ALGORITHMS[v].verl_name or v)),
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
    "trainer.device": K(None, "device", "null -> cuda when available, else cpu", _device,
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

FREE_FORM = frozenset({
    A + "model.override_config", C + "model.override_config", "reward_model.model.override_config",
    A + "rollout.engine_kwargs", "reward_model.rollout.engine_kwargs", A + "rollout.checkpoint_engine.engine_kwargs",
    *(f"{role}.megatron.override_{what}_config" for role in (A + "actor", A + "ref", C[:-1], "reward_model")
      for what in ("transformer", "ddp", "mcore_model")),
    A + "actor.optim.override_optimizer_config", C + "optim.override_optimizer_config",
    A + "model.fused_kernel_options", "data.apply_chat_template_kwargs", "reward_model.reward_kwargs",
    "custom_reward_function.reward_kwargs", "global_profiler.global_tool_config.torch_memory.kw_args",
    "trainer.npu_profile.options", "trainer.controller_nsight_options", "trainer.worker_nsight_options",
    "global_profiler.global_tool_config.nsys.controller_nsight_options",
    "global_profiler.global_tool_config.nsys.worker_nsight_options", "ray_kwargs.ray_init",
    *(f"{role}.fsdp_config.mixed_precision" for role in (A + "actor", A + "ref", C + "model")),
})
"""Mappings whose sub-keys are the user's own (accepted with a note, no effect)."""

MISSPELLED_PREFIXES = {"actor_rollout.ref.": A}
"""Prefixes from widely copied guides, read as the right key with a warning."""

TABLE.update(MULTI_TURN_KEYS)  # verl's multi_turn.* keys onto the agent loop's (multi_turn.py)

R = A + "rollout."
TABLE.update({
    # keys verl's own example lines set that no composed config has (verl does not read them either)
    A + "model.torch_dtype": K(None, None, "in verl's examples, not its config; precision follows bf16/fp16"),
    R + "sglang_rollout_mode": K(None, None, "an sglang option in verl's examples; ppokit rolls out with hf or vllm"),
    "algorithm.rollout_correction.rollout_is": K(None, "rollout_is", "null -> off; token or sequence", _rollout_is,
                                                  _if("rollout_is", lambda v: None if v == "off" else v)),
    "algorithm.rollout_correction.rollout_is_threshold": K(2.0, "rollout_is_cap", "the truncation cap"),
    "reward_model.reward_kwargs.overlong_buffer_cfg.enable": K(None, "enable_overlong_reward_buffer",
                                                                "verl's DAPO recipe (a + key)",
                                                                _unless_null("enable_overlong_reward_buffer"),
                                                                lambda a: SKIP),
    "reward_model.reward_kwargs.overlong_buffer_cfg.len": K(None, "overlong_reward_buffer", "tokens",
                                                             _unless_null("overlong_reward_buffer"), lambda a: SKIP),
    "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor": K(None, "overlong_penalty_factor", "",
                                                                        _unless_null("overlong_penalty_factor"),
                                                                        lambda a: SKIP),
})
INTERPOLATED["data.tool_config_path"] = "${" + M + "tool_config_path}"

ERAS: dict[str, tuple[str, ...]] = era_leaves()
"""Every leaf of every snapshotted verl release -> the releases holding it (ppokit/dialects/verl/eras.py)."""


class Resolution(NamedTuple):
    kind: str  # "mapped" | "no_effect" | "refused"
    reason: str  # the note (mapped), why it has no effect, or the refusal sentence
    entry: VerlKey | None
    rule: Rule | None


def free_form_root(key: str) -> str | None:
    """The free-form mapping ``key`` lies in (its sub-keys are the user's own), or None."""
    parts = key.split(".")
    return next((".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in FREE_FORM), None)


def is_known(key: str) -> bool:
    """True for a key of some snapshotted verl release, of the table, or inside a free-form mapping."""
    return key in TABLE or key in ERAS or free_form_root(key) is not None


def removed_in(key: str) -> str | None:
    """The first snapshotted release that no longer has ``key`` (None: still in the newest)."""
    held = ERAS.get(key)
    if not held or VERSIONS[-1] in held:
        return None
    return VERSIONS[VERSIONS.index(held[-1]) + 1]


def resolve(key: str) -> Resolution | None:
    """What ``key`` does here: TABLE, then RULES, then free-form mappings; None for a key in no era."""
    entry = TABLE.get(key)
    if entry is not None:
        kind = "refused" if entry.refuse else ("mapped" if entry.target or entry.convert else "no_effect")
        return Resolution(kind, entry.refuse or entry.note, entry, None)
    if not is_known(key):
        return None
    for rule in RULES:
        if fnmatch.fnmatchcase(key, rule.pattern):
            return Resolution("refused" if rule.refuse else "no_effect", rule.reason, None, rule)
    root = free_form_root(key)
    if root is not None:
        return Resolution("no_effect", f"free-form options of {root} that ppokit does not read", None, None)
    return Resolution("unresolved", "a verl key the table has no entry for (a ppokit bug)", None, None)
