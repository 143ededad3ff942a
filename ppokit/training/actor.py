"""The actor update: `update_iters` passes over mini-batches, micro-batches accumulated into one step.

Every micro-batch loss is its numerator over the *mini-batch's* global denominators (all
micro-batches, all ranks), so the accumulated gradient equals the gradient of one big batch.
DeepSpeed's own 1/gradient_accumulation scaling is therefore switched off (`scale_wrt_gas=False`)
and the accumulation boundary is set explicitly.
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist

from ppokit.algos.kl import kl_penalty
from ppokit.algos.policy_loss import POLICY_LOSSES
from ppokit.algos.reduce import reduce_loss
from ppokit.training.batch import RolloutBatch
from ppokit.training.distributed import collective_device
from ppokit.training.forward import policy_forward


def dp_world_size() -> int:
    """Data-parallel ranks whose gradients DeepSpeed averages (losses are scaled back up by this)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def pre_step_grad_norm(engine) -> float | None:
    """The gradient norm before clipping, where DeepSpeed does not record it (ZeRO-0 without fp16 clips
    with torch and keeps no norm); None where `engine.get_global_grad_norm()` has it after the step."""
    if engine.zero_optimization_stage() != 0 or engine.fp16_enabled():
        return None
    norms = [p.grad.detach().float().norm() for p in engine.module.parameters() if p.grad is not None]
    return float(torch.stack(norms).norm()) if norms else 0.0


def global_denominators(mask: torch.Tensor) -> tuple[float, float]:
    """(valid tokens, sequences) of a mini-batch summed over data-parallel ranks. mask: (b, R)."""
    totals = torch.tensor([float(mask.sum()), float(mask.shape[0])], dtype=torch.float64)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        totals = totals.to(collective_device())  # NCCL reduces only GPU tensors
        dist.all_reduce(totals)
    return float(totals[0]), float(totals[1])


def chunks(n: int, size: int) -> list[list[int]]:
    """Consecutive index lists of at most `size` covering range(n)."""
    return [list(range(i, min(i + size, n))) for i in range(0, n, max(size, 1))]


def micro_loss(module, part: RolloutBatch, args, denoms, compute_dtype, device, extra_loss=None):
    """Loss of one micro-batch (already scaled to its share of the mini-batch) and its metrics."""
    mask = part.response_mask
    # Entropy is always logged; it carries gradient only when it is part of the loss.
    entropy_mode = "grad" if args.entropy_coeff != 0 else "detached"
    logp, entropy = policy_forward(module, part, args.chunk_size, entropy_mode, compute_dtype, device, part.temperature)
    old = part.old_logprobs if part.old_logprobs is not None else logp.detach()
    low = args.clip_range_ratio_low if args.clip_range_ratio_low is not None else args.clip_range_ratio
    high = args.clip_range_ratio_high if args.clip_range_ratio_high is not None else args.clip_range_ratio
    pg, m = POLICY_LOSSES[args.policy_loss](logp, old, part.advantages, mask, low, high, args.clip_ratio_c)
    tokens, seqs = denoms
    norm_const = args.loss_agg_norm_constant or args.max_dec_len

    def reduce(x):
        return reduce_loss(x, mask, args.loss_agg_mode, norm_constant=norm_const, global_tokens=tokens, global_seqs=seqs)

    pg_loss = reduce(pg)
    loss = args.pg_loss_coeff * pg_loss
    metrics = {"actor/pg_loss": float(pg_loss.detach())}
    metrics.update({f"actor/{k}": float(v) for k, v in m.items()})
    if args.kl_loss_coeff > 0 and part.ref_logprobs is not None:
        kl = reduce(kl_penalty(logp, part.ref_logprobs, args.kl_loss_type))
        loss = loss + args.kl_loss_coeff * kl
        metrics["actor/kl_loss"] = float(kl.detach())
    if entropy is not None:
        ent = reduce(entropy)
        if args.entropy_coeff != 0:
            loss = loss - args.entropy_coeff * ent
        metrics["actor/entropy"] = float(ent.detach())
    if part.ref_logprobs is not None:
        d = (logp.detach() - part.ref_logprobs) * mask
        metrics["actor/kl"] = float(d.sum()) / tokens  # k1 estimate of KL(actor || ref), mini-batch share
    if extra_loss is not None:
        extra, extra_metrics = extra_loss()
        loss = loss + extra
        metrics.update(extra_metrics)
    return loss, metrics


def actor_update(engine, batch: RolloutBatch, args, plan, compute_dtype, device, extra_loss=None) -> dict[str, float]:
    """Run `plan.update_iters` passes of optimizer steps on `batch`; return averaged metrics.

    extra_loss: optional callable returning (loss, metrics) added once per mini-batch (PTX).
    """
    module = engine.module
    module.train()
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    mini_size = plan.mini_batch_sequences_per_rank
    for _ in range(plan.update_iters):
        for mini_idx in chunks(len(batch), mini_size):
            mini = batch.select(mini_idx)
            denoms = global_denominators(mini.response_mask)
            micro = chunks(len(mini), plan.micro_batch_size)
            for k, idx in enumerate(micro):
                part = mini.select(idx).trimmed()
                add = extra_loss if (extra_loss is not None and k == 0) else None
                # Forward through the engine, not engine.module: ZeRO-3 counts micro-steps in the engine's
                # forward and would otherwise overwrite, not accumulate, the micro-batches' gradients.
                loss, metrics = micro_loss(engine, part, args, denoms, compute_dtype, device, add)
                engine.set_gradient_accumulation_boundary(k == len(micro) - 1)
                # Global denominators make the per-rank losses sum to the batch loss; DeepSpeed averages
                # gradients over ranks, so scale back up by the world size.
                engine.backward(loss * dp_world_size(), scale_wrt_gas=False)
                norm = pre_step_grad_norm(engine) if k == len(micro) - 1 else None
                engine.step()
                for key, v in metrics.items():
                    sums[key] += v
                    counts[key] += 1
            sums["actor/grad_norm"] += norm if norm is not None else float(engine.get_global_grad_norm() or 0.0)
            counts["actor/grad_norm"] += 1
    out = {k: sums[k] / counts[k] for k in sums}
    # Loss-like terms are per-micro-batch shares of the mini-batch value: report the mini-batch value.
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/kl"):
        if key in out:
            out[key] *= counts[key] / max(counts["actor/grad_norm"], 1)
    out["actor/lr"] = float(engine.get_lr()[0])
    return out
