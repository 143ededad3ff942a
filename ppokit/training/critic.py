"""The PPO critic: a value model in its own DeepSpeed engine, its values for a batch, and its update."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from ppokit.algos.masked import masked_mean, masked_var
from ppokit.algos.reduce import reduce_loss
from ppokit.algos.value_loss import clipped
from ppokit.training.actor import chunks, dp_world_size, global_denominators
from ppokit.training.batch import RolloutBatch
from ppokit.training.forward import batched_values, value_forward
from ppokit.training.setup import lr_schedule_spec


@dataclass
class Critic:
    engine: object  # deepspeed engine around a ValueModel
    compute_dtype: torch.dtype | None
    device: torch.device
    batch_size: int  # per_device_value_batch_size

    def values(self, batch: RolloutBatch) -> torch.Tensor:
        """(B, R) values of the batch's states, no grad."""
        return batched_values(self.engine.module, batch, self.batch_size, self.compute_dtype, self.device)

    def update(self, batch: RolloutBatch, args, plan) -> dict[str, float]:
        return critic_update(self, batch, args, plan)

    def save(self, folder: Path, weights_only: bool) -> None:
        from ppokit.checkpoint import is_rank0
        from ppokit.models import save_value_model

        if not weights_only:
            self.engine.save_checkpoint(str(folder / "critic_ds"), tag="state")
        if is_rank0():
            save_value_model(self.engine.module, folder / "critic")

    def load(self, folder: Path) -> None:
        from ppokit.models import load_value_state

        if (folder / "critic_ds").is_dir():
            self.engine.load_checkpoint(str(folder / "critic_ds"), tag="state", load_optimizer_states=True,
                                        load_lr_scheduler_states=True)
        else:
            load_value_state(self.engine.module, folder / "critic")


def critic_source(args, policy) -> str:
    """PaddleNLP's rule: critic_model_name_or_path, else the reward model path; ppokit falls back to the actor."""
    return args.critic_model_name_or_path or args.reward_model_name_or_path or policy.model_path


def build_critic(args, dist, plan, policy) -> Critic:
    """A value model (backbone + fresh scalar head) trained by its own engine with the critic_* schedule."""
    from ppokit.engine import build_engine, deepspeed_config, zero_stage_from
    from ppokit.models import dtype_for, load_value_model, resolve_model_path

    param_dtype, compute_dtype = dtype_for(args.bf16, args.fp16, policy.device)
    source = critic_source(args, policy)
    if source is None:
        model = load_value_model(None, dtype=param_dtype, device=policy.device, backbone=policy.engine.module)
    else:
        model = load_value_model(resolve_model_path(source), dtype=param_dtype, device=policy.device,
                                 gradient_checkpointing=bool(args.critic_recompute))
    lr = args.critic_learning_rate if args.critic_learning_rate is not None else args.learning_rate
    wd = args.critic_weight_decay if args.critic_weight_decay is not None else args.weight_decay
    ds = deepspeed_config(
        zero_stage=zero_stage_from(args.sharding), offload_optimizer="optimizer" in args.offload_level,
        micro_batch_size=plan.micro_batch_size, grad_accum=plan.gradient_accumulation_steps,
        world_size=plan.world_size, lr=lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon,
        weight_decay=wd, max_grad_norm=args.max_grad_norm, bf16=args.bf16, fp16=args.fp16, device=policy.device,
    )
    total = plan.optimizer_steps_per_rollout * max(args.max_steps, 1)
    spec = lr_schedule_spec(args, total, critic=True)
    engine = build_engine(model, ds, spec)
    bs = args.per_device_value_batch_size if args.per_device_value_batch_size > 0 else plan.micro_batch_size
    return Critic(engine=engine, compute_dtype=compute_dtype, device=policy.device, batch_size=bs)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[returns - values] / Var[returns] over valid tokens."""
    var_r = masked_var(returns, mask)
    if float(var_r) == 0.0:
        return 0.0
    return float(1 - masked_var(returns - values, mask) / var_r)


def critic_update(critic: Critic, batch: RolloutBatch, args, plan) -> dict[str, float]:
    """Clipped value loss on the batch's returns, in the actor's mini/micro-batch layout."""
    engine = critic.engine
    engine.module.train()
    sums: dict[str, float] = defaultdict(float)
    n_steps = 0
    for _ in range(plan.update_iters):
        for mini_idx in chunks(len(batch), plan.mini_batch_sequences_per_rank):
            mini = batch.select(mini_idx)
            tokens, seqs = global_denominators(mini.response_mask)
            micro = chunks(len(mini), plan.micro_batch_size)
            for k, idx in enumerate(micro):
                part = mini.select(idx).trimmed()
                values = value_forward(engine.module, part, critic.compute_dtype, critic.device)
                per_token, m = clipped(values, part.values, part.returns, part.response_mask, args.clip_range_value)
                loss = reduce_loss(per_token, part.response_mask, "token-mean", global_tokens=tokens, global_seqs=seqs)
                engine.set_gradient_accumulation_boundary(k == len(micro) - 1)
                engine.backward(loss * dp_world_size(), scale_wrt_gas=False)
                engine.step()
                sums["critic/value_loss"] += float(loss.detach())
                sums["critic/vf_clipfrac"] += float(m["vf_clipfrac"]) / len(micro)
            sums["critic/grad_norm"] += float(engine.get_global_grad_norm() or 0.0)
            n_steps += 1
    out = {k: v / max(n_steps, 1) for k, v in sums.items()}
    out["critic/values_mean"] = float(masked_mean(batch.values, batch.response_mask))
    out["critic/explained_variance"] = explained_variance(batch.values, batch.returns, batch.response_mask)
    out["critic/lr"] = float(engine.get_lr()[0])
    return out
