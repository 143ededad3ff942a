"""The actor's loss on one micro-batch, and its update through `minibatch_update`.

The policy loss, KL loss and reduction are looked up in the algos registries by the names in the
step's `LossConfig`; nothing here is a formula of its own.
"""

from __future__ import annotations

from ppokit.algos.kl import kl_penalty
from ppokit.algos.lm_loss import positive_example_nll
from ppokit.algos.policy_loss import POLICY_LOSSES
from ppokit.algos.reduce import reduce_loss
from ppokit.algos.rollout_correction import logprob_mismatch, truncated_is_weights
from ppokit.engine import all_reduce_sum, current_lr
from ppokit.training.batch import RolloutBatch
from ppokit.training.forward import policy_forward
from ppokit.training.update import LossConfig, chunks, minibatch_update


def actor_loss(engine, part: RolloutBatch, cfg: LossConfig, denoms, compute_dtype, device, extra_loss=None,
               positive_tokens=None):
    """Loss of one micro-batch (already scaled to its share of the mini-batch) and its metrics."""
    mask = part.loss_mask
    # Entropy is always logged; it carries gradient only when it is part of the loss.
    entropy_mode = "grad" if cfg.entropy_coeff != 0 else "detached"
    logp, entropy = policy_forward(engine, part, cfg.chunk_size, entropy_mode, compute_dtype, device, part.temperature)
    old = part.old_logprobs if part.old_logprobs is not None else logp.detach()
    pg, m = POLICY_LOSSES[cfg.policy_loss](logp, old, part.advantages, mask, cfg.clip_low, cfg.clip_high,
                                           cfg.clip_ratio_c)
    pg, rollout_metrics = rollout_correction(pg, old, part, cfg)
    tokens, seqs = denoms

    def reduce(x):
        return reduce_loss(x, mask, cfg.agg_mode, norm_constant=cfg.norm_constant, global_tokens=tokens,
                           global_seqs=seqs)

    pg_loss = reduce(pg)
    loss = cfg.pg_coeff * pg_loss
    metrics = {"actor/pg_loss": float(pg_loss.detach())}
    metrics.update({f"actor/{k}": float(v) for k, v in m.items()})
    metrics.update(rollout_metrics)
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
    if positive_tokens is not None:  # VAPO: NLL of the responses that scored > 0, over all their tokens
        nll, positive = positive_example_nll(logp, mask, part.scores)
        lm = reduce_loss(nll, positive, "token-mean", global_tokens=positive_tokens)
        loss = loss + cfg.positive_lm_coeff * lm
        metrics["actor/positive_lm_loss"] = float(lm.detach())
    if extra_loss is not None:
        extra, extra_metrics = extra_loss()
        loss = loss + extra
        metrics.update(extra_metrics)
    return loss, metrics


def rollout_correction(pg, old, part: RolloutBatch, cfg: LossConfig) -> tuple:
    """Weight the per-token policy loss pg (b, R) by truncated importance sampling (`rollout_is`) and measure the
    rollout-train mismatch, when the rollout engine gave log-probs. `old` (b, R): the trainer's log-probs of the
    sampling policy (precomputed, or this forward's when the rollout has one optimizer step)."""
    if part.rollout_logprobs is None:
        if cfg.rollout_is != "off":
            raise ValueError(f"rollout_is={cfg.rollout_is} needs the rollout engine's log-probs, but this batch has "
                             "none (a batch built without them); set rollout_is: off.")
        return pg, {}
    rollout_logp, mask = part.rollout_logprobs.to(old.device), part.loss_mask.to(old.device)
    diff = logprob_mismatch(old, rollout_logp, mask)
    metrics = {"rollout/logprob_diff": float(diff["logprob_diff"]),
               "rollout/logprob_diff/max": float(diff["logprob_diff_max"])}
    if cfg.rollout_is != "off":
        weights, m = truncated_is_weights(old, rollout_logp, mask, cfg.rollout_is, cfg.rollout_is_cap)
        pg = pg * weights
        metrics.update({f"rollout/{k}": float(v) for k, v in m.items()})
    return pg, metrics


def positive_token_counts(batch: RolloutBatch, plan) -> list[float]:
    """Tokens of the responses scored > 0 in each mini-batch, summed over ranks, in `minibatch_update`'s
    order (update_iters passes over the same mini-batches): the positive-example LM loss's denominators."""
    if batch.scores is None:
        raise ValueError("the positive-example LM loss needs scores: score the batch first (Session.score(batch)).")
    positive = batch.loss_mask * (batch.scores > 0).to(batch.loss_mask.dtype)[:, None]
    minis = chunks(len(batch), plan.mini_batch_sequences_per_rank)
    counts = list(all_reduce_sum(*[float(positive[idx].sum()) for idx in minis]))
    return counts * plan.update_iters


def actor_update(policy, batch: RolloutBatch, cfg: LossConfig, plan, extra_loss=None) -> dict[str, float]:
    """`plan.update_iters` passes of actor optimizer steps on `batch`; the averaged metrics.

    extra_loss: optional callable returning (loss, metrics), added once per mini-batch (PTX).
    """
    engine = policy.engine
    positives = iter(positive_token_counts(batch, plan)) if cfg.positive_lm_coeff > 0 else None
    current: dict[str, float] = {}

    def loss_fn(part, denoms, first):
        if positives is not None and first:  # a new mini-batch: its positive-response tokens on all ranks
            current["tokens"] = next(positives)
        return actor_loss(engine, part, cfg, denoms, policy.compute_dtype, policy.device,
                          extra_loss if first else None, current.get("tokens"))

    lr = current_lr(engine)  # the rate this rollout's (first) optimizer step uses, not the one after it
    out = minibatch_update(engine, batch, plan, loss_fn, prefix="actor", device=policy.device)
    out["actor/lr"] = lr
    return out
