"""The actor's loss on one micro-batch, and its update through `minibatch_update`.

The policy loss, KL loss and reduction are looked up in the algos registries by the names in the
step's `LossConfig`; nothing here is a formula of its own.
"""

from __future__ import annotations

from ppokit.algos.kl import kl_penalty
from ppokit.algos.policy_loss import POLICY_LOSSES
from ppokit.algos.reduce import reduce_loss
from ppokit.engine import current_lr
from ppokit.training.batch import RolloutBatch
from ppokit.training.forward import policy_forward
from ppokit.training.update import LossConfig, minibatch_update


def actor_loss(engine, part: RolloutBatch, cfg: LossConfig, denoms, compute_dtype, device, extra_loss=None):
    """Loss of one micro-batch (already scaled to its share of the mini-batch) and its metrics."""
    mask = part.response_mask
    # Entropy is always logged; it carries gradient only when it is part of the loss.
    entropy_mode = "grad" if cfg.entropy_coeff != 0 else "detached"
    logp, entropy = policy_forward(engine, part, cfg.chunk_size, entropy_mode, compute_dtype, device, part.temperature)
    old = part.old_logprobs if part.old_logprobs is not None else logp.detach()
    pg, m = POLICY_LOSSES[cfg.policy_loss](logp, old, part.advantages, mask, cfg.clip_low, cfg.clip_high,
                                           cfg.clip_ratio_c)
    tokens, seqs = denoms

    def reduce(x):
        return reduce_loss(x, mask, cfg.agg_mode, norm_constant=cfg.norm_constant, global_tokens=tokens,
                           global_seqs=seqs)

    pg_loss = reduce(pg)
    loss = cfg.pg_coeff * pg_loss
    metrics = {"actor/pg_loss": float(pg_loss.detach())}
    metrics.update({f"actor/{k}": float(v) for k, v in m.items()})
    if cfg.kl_coeff > 0 and part.ref_logprobs is not None:
        kl = reduce(kl_penalty(logp, part.ref_logprobs, cfg.kl_estimator))
        loss = loss + cfg.kl_coeff * kl
        metrics["actor/kl_loss"] = float(kl.detach())
    if entropy is not None:
        ent = reduce(entropy)
        if cfg.entropy_coeff != 0:
            loss = loss - cfg.entropy_coeff * ent
        metrics["actor/entropy"] = float(ent.detach())
    if part.ref_logprobs is not None:
        d = (logp.detach() - part.ref_logprobs) * mask
        # KL(actor || ref), mini-batch share: k3 is never negative (k1, its unbiased but noisy mean, can be)
        metrics["actor/kl"] = float((kl_penalty(logp.detach(), part.ref_logprobs, "k3") * mask).sum()) / tokens
        metrics["actor/kl_k1"] = float(d.sum()) / tokens
    if extra_loss is not None:
        extra, extra_metrics = extra_loss()
        loss = loss + extra
        metrics.update(extra_metrics)
    return loss, metrics


def actor_update(policy, batch: RolloutBatch, cfg: LossConfig, plan, extra_loss=None) -> dict[str, float]:
    """`plan.update_iters` passes of actor optimizer steps on `batch`; the averaged metrics.

    extra_loss: optional callable returning (loss, metrics), added once per mini-batch (PTX).
    """
    engine = policy.engine

    def loss_fn(part, denoms, first):
        return actor_loss(engine, part, cfg, denoms, policy.compute_dtype, policy.device,
                          extra_loss if first else None)

    out = minibatch_update(engine, batch, plan, loss_fn, prefix="actor")
    out["actor/lr"] = current_lr(engine)
    return out
