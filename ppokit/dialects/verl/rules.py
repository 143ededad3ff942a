"""verl keys outside the explicit table (`table.TABLE`), by pattern: accepted with no effect here
(with the reason), or refused with a sentence when their value asks for a feature ppokit does not have."""

from __future__ import annotations

from .convert import Rule

_RAY = "ppokit has no Ray: processes are started by ppokit.launch (torchrun) and share one trainer"
_FSDP = "ppokit trains with DeepSpeed ZeRO (sharding), not FSDP"
_KERNEL = "ppokit runs plain PyTorch/transformers kernels"
_DYN = "ppokit batches by sequence count, not by token budget"
_VLLM = "vLLM engine option that ppokit's engine sets itself"
_SHARED = "ppokit trains the critic with the actor's batch sizes and epochs"
A = "actor_rollout_ref."
R = A + "rollout."
_MEGATRON = "ppokit trains with DeepSpeed ZeRO, not Megatron-LM (parallel sizes and Megatron options)"
_PROFILE = "profiler switch; ppokit logs step timings as metrics"
_SEED = "ppokit's seed sets data order, sampling and initialisation"
_TEXT = "ppokit trains text-only models"
_SERVE = "rollout-server option (async servers, weight sync, tracing) that ppokit's in-process engine does not need"
_RM = "reward-model serving option (Ray resource pools, generative reward models)"
_LOSS_MODE = "read only by a policy_loss.loss_mode ppokit refuses (clip_cov, kl_cov, geo_mean, sapo ...)"
_MLORA = "verl's Megatron LoRA block; ppokit reads actor_rollout_ref.model.lora_rank/lora_alpha"
U = Rule
RULES: tuple[Rule, ...] = (
    # ---- refused: they change what is trained or scored, and ppokit has no such feature
    U("algorithm.use_pf_ppo", "ppokit has no PF-PPO sample reweighting", refuse=True),
    U("algorithm.rollout_correction.rollout_rs*", "ppokit has no rollout rejection sampling (it weights with "
      "rollout_is only)", refuse=True),
    U("algorithm.rollout_correction.rollout_token_veto_threshold", "ppokit has no token veto", refuse=True),
    U("algorithm.rollout_correction.bypass_mode", "ppokit always recomputes old log-probs", refuse=True),
    U("algorithm.rollout_correction.rollout_is_batch_normalize", "ppokit does not normalise IS weights",
      refuse=True),
    U("algorithm.rollout_correction.use_policy_gradient", "ppokit has no pure policy-gradient IS loss", refuse=True),
    U("algorithm.rollout_correction.loss_type", "ppokit applies rollout_is to the clipped PPO loss only",
      refuse=True, inert=("ppo_clip",)),
    U("reward_model.sandbox_fusion.url", "ppokit has no code sandbox; score code with reward_functions or "
      "reward_server", refuse=True),
    U("trainer.val_only", "ppokit has no validation-only run", refuse=True),
    U("critic.model.lora_rank", "ppokit puts LoRA on the actor only", refuse=True),
    U("*.model.lora.rank", _MLORA, refuse=True),
    U(A + "model.lora_adapter_path", "ppokit starts LoRA from fresh adapters", refuse=True),
    U(A + "model.lora.adapter_path", "ppokit starts LoRA from fresh adapters", refuse=True),
    U(A + "model.mtp.enable*", "ppokit has no multi-token-prediction training or speculative rollout",
      refuse=True),
    U("*.router_replay.mode", "ppokit has no MoE router replay", refuse=True, inert=("disabled",)),
    U(R + "enable_rollout_routing_replay", "ppokit has no MoE router replay", refuse=True),
    U(A + "actor.loss_scale_factor", "ppokit's loss denominators span the whole mini-batch; no extra scale",
      refuse=True),
    U("data.apply_chat_template_kwargs*", "ppokit renders chat templates with their defaults; set chat_template "
      "to a template that does what you need", refuse=True),
    U(A + "model.custom_chat_template", "set ppokit's chat_template (a template file or folder)", refuse=True),
    U("data.sampler.class_path", "ppokit has no pluggable sampler (curricula)", refuse=True),
    U("data.datagen.path", "ppokit has no dynamic dataset generator", refuse=True),
    U(R + "agent.agent_loop_config_path", "ppokit has no agent loops", refuse=True),
    U(R + "agent.custom_async_server.path", "ppokit has no pluggable rollout servers", refuse=True),
    U("reward_manager.module.path", "ppokit has no pluggable reward managers; use custom_reward_function",
      refuse=True),
    U("*.optim.optimizer", "ppokit trains with AdamW", refuse=True, inert=("AdamW", "adam", "adamw")),
    U("*.optim.num_cycles", "ppokit's cosine schedule is a half cycle", refuse=True, inert=(0.5,)),
    U("critic.loss_agg_mode", "ppokit's value loss is a token mean over the mini-batch", refuse=True,
      inert=("token-mean",)),
    # ---- accepted, no effect here
    U("*._target_", "verl's dataclass binding (Hydra _target_)"),
    U("*.megatron.*", _MEGATRON),
    U("*.fsdp_config.*", _FSDP),
    U("*.profile*", _PROFILE),
    U("global_profiler.*", _PROFILE),
    U("trainer.*nsight_options*", _PROFILE),
    U("trainer.npu_profile.*", _PROFILE),
    U("ray_kwargs.*", _RAY),
    U("*.nccl_timeout", "the process-group timeout is ppokit.launch's"),
    U("trainer.esi_redundant_time", _RAY),
    U("transfer_queue.*", _RAY),
    U("trainer.use_legacy_worker_impl", _RAY),
    U("*.load_weight", "weights always load from the model path"),
    U("*.checkpoint.*", "checkpoints always hold HF weights, optimizer and run state"),
    U("trainer.remove_previous_ckpt_in_save", "use trainer.max_actor_ckpt_to_keep"),
    U("trainer.val_generations_to_log_to_wandb", "evaluation writes its samples to the output folder"),
    U("*.param_offload", _FSDP),
    U("*data_loader_seed", _SEED),
    U("data.seed", _SEED),
    U("*.use_shm", "a loading switch (shared memory); models load from their folder"),
    U("data.dataloader_num_workers", "prompts are read in process"),
    U("data.val_max_samples", "evaluation reads all of eval_datasets"),
    U("data.validation_shuffle", "evaluation reads eval_datasets in order"),
    U("data.image_patch_size", _TEXT), U("data.return_multi_modal_inputs", _TEXT),
    U(A + "actor.freeze_vision_tower", _TEXT),
    U("data.sampler.class_name", "read only with data.sampler.class_path"),
    U("data.datagen.name", "read only with data.datagen.path"),
    U("algorithm.pf_ppo.*", "read only with algorithm.use_pf_ppo"),
    U(A + "actor.policy_loss.*", _LOSS_MODE),
    U(A + "actor.tau_*", _LOSS_MODE),
    U("reward_model.sandbox_fusion.*", "read only with reward_model.sandbox_fusion.url"),
    U("*.model.lora.*", _MLORA),
    U("critic.model.lora_alpha", "ppokit puts LoRA on the actor only"),
    U("critic.model.target_modules", "ppokit puts LoRA on the actor only"),
    U(A + "model.exclude_modules", "ppokit puts LoRA on every attention and MLP projection"),
    U(A + "model.mtp.*", "read only with model.mtp.enable"),
    U(R + "mtp", "read only with model.mtp.enable"),
    U("*.router_replay.*", "read only with router_replay.mode"),
    U(A + "model.tokenizer_path", "the tokenizer comes from the model folder"),
    U(A + "model.hf_config_path", "the model config comes from the model folder"),
    U("*.model.enable_activation_offload", "a memory switch; ppokit recomputes activations (recompute)"),
    U("*.model.gradient_checkpointing_kwargs.*", "transformers checkpoints whole decoder layers"),
    U("*.model.tiled_mlp.*", _KERNEL),
    U("*.model.use_fused_kernels", _KERNEL),
    U("*.model.fused_kernel_options", _KERNEL),
    U(A + "actor.use_fused_kernels", _KERNEL),
    U(A + "actor.use_remove_padding", "ppokit masks padding with attention masks"),
    U("*entropy_checkpointing", _KERNEL),
    U("*entropy_from_logits_with_chunking", "ppokit computes log-probs in chunks of chunk_size tokens"),
    U(A + "actor.calculate_entropy", "a metric switch"),
    U(A + "actor.*sum_pi_squared*", "a metric switch"),
    U(A + "actor.use_prefix_grouper", "a throughput switch (shared-prefix batching)"),
    U("*.rollout_n", "follows actor_rollout_ref.rollout.n"),
    U(A + "ref.model", "the reference model is the actor's starting weights"),
    U("critic.optim.betas", "the critic uses the actor's AdamW betas (actor_rollout_ref.actor.optim.betas)"),
    U("critic.optim.clip_grad", "actor and critic share max_grad_norm (actor_rollout_ref.actor.grad_clip)"),
    U("*.optim.*", "an optimizer/scheduler option of verl's Megatron or FSDP engine that ppokit's AdamW schedule "
      "does not have"),
    U("critic.kl_ctrl.*", "never read by verl either (the KL controller is algorithm.kl_ctrl)"),
    U("critic.enable", "ppokit trains a critic exactly when adv_estimator is gae"),
    U("reward_model.rollout.*", _RM), U("reward_model.enable_resource_pool", _RM),
    U("reward_model.n_gpus_per_node", _RM), U("reward_model.nnodes", _RM), U("reward_model.num_workers", _RM),
    U("reward_model.*reward_loop*", _RM),
    U("reward_model.model.*", "the reward model loads with transformers' built-in classes"),
    U("reward_manager.*", "rewards are computed batch-wise in process"),
    U(R + "agent.*", _SERVE), U(R + "checkpoint_engine.*", _SERVE), U(R + "prometheus.*", _SERVE),
    U(R + "trace.*", _SERVE), U(R + "skip_*", _SERVE), U(R + "update_weights_bucket_megabytes", _SERVE),
    U(R + "layer_name_map.*", _SERVE), U(R + "layered_summon", _SERVE), U(R + "multi_stage_wake_up", _SERVE),
    U(R + "over_sample_rate", _SERVE), U(R + "scheduling_policy", _SERVE), U(R + "chat_scheduler", _SERVE),
    U(R + "calculate_log_probs", "ppokit keeps the rollout log-probs rollout_is needs"),
    U(R + "logprobs_mode", _VLLM), U(R + "cudagraph_capture_sizes", _VLLM), U(R + "enable_prefix_caching", _VLLM),
    U(R + "quantization*", "rollout weights are not quantised in ppokit"),
    U(R + "*_parallel_size", "the vLLM rollout shards by tensor_model_parallel_size only"),
)
"""verl keys outside TABLE, by pattern (first match wins; refusals first). Every leaf of every snapshotted
verl release resolves through TABLE or one of these, and every rule matches a leaf (tests/verl/test_verl_eras.py)."""

