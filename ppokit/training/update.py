"""The one update loop: `minibatch_update(engine, batch, plan, loss_fn)`, used by the actor, the critic and PTX.

`update_iters` passes over the batch; each pass walks its mini-batches (one optimizer step each) and
splits every mini-batch into micro-batches. A micro-batch's loss is its numerator over the
*mini-batch's* denominators (all micro-batches, all ranks: `minibatch_denominators`), so the
accumulated gradient equals the gradient of the whole mini-batch; the engine's `backward_and_step`
(finite-loss check, explicit accumulation boundary, world-size scaling) does the rest.

`LossConfig` is what the losses read, resolved from the arguments once per step (a notebook may change
`s.args` between steps): clip range, normaliser, aggregation mode, coefficients.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ppokit.algos.reduce import global_denominators
from ppokit.engine import all_reduce_sum, backward_and_step
from ppokit.training.batch import RolloutBatch
from ppokit.training.device import to_model_device
from ppokit.training.metric_table import reduction


@dataclass(frozen=True)
class LossConfig:
    """The loss settings of one step, resolved from the arguments (no defaults recomputed per micro-batch)."""

    policy_loss: str  # key of algos.POLICY_LOSSES
    clip_low: float
    clip_high: float
    clip_ratio_c: float | None  # dual clip
    agg_mode: str  # loss_agg_mode, key of algos.REDUCTIONS
    norm_constant: float  # C of seq-mean-token-sum-norm
    pg_coeff: float
    kl_coeff: float  # kl_loss_coeff
    kl_estimator: str  # kl_loss_type
    entropy_coeff: float
    clip_range_value: float
    chunk_size: int
    rollout_is: str = "off"  # truncated importance sampling against the rollout engine: off | token | sequence
    rollout_is_cap: float = 2.0
    positive_lm_coeff: float = 0.0  # VAPO's positive-example LM loss weight

    @classmethod
    def from_args(cls, args) -> LossConfig:
        """clip_range_ratio_low/high default to clip_range_ratio; the normaliser to max_dec_len."""
        low, high = args.clip_range_ratio_low, args.clip_range_ratio_high
        return cls(
            policy_loss=args.policy_loss,
            clip_low=args.clip_range_ratio if low is None else low,
            clip_high=args.clip_range_ratio if high is None else high,
            clip_ratio_c=args.clip_ratio_c,
            agg_mode=args.loss_agg_mode,
            norm_constant=args.loss_agg_norm_constant or args.max_dec_len,
            pg_coeff=args.pg_loss_coeff,
            kl_coeff=args.kl_loss_coeff,
            kl_estimator=args.kl_loss_type,
            entropy_coeff=args.entropy_coeff,
            clip_range_value=args.clip_range_value,
            chunk_size=args.chunk_size,
            rollout_is=args.rollout_is,
            rollout_is_cap=args.rollout_is_cap,
            positive_lm_coeff=args.positive_lm_coeff,
        )


def chunks(n: int, size: int) -> list[list[int]]:
    """Consecutive index lists of at most `size` covering range(n)."""
    return [list(range(i, min(i + size, n))) for i in range(0, n, max(size, 1))]


def length_sorted_chunks(attention_mask: torch.Tensor, size: int, group_ids: torch.Tensor | None = None) -> list[list[int]]:
    """Index lists of at most `size` rows, rows ordered by length (attention_mask (b, L) sums), so each
    trimmed micro-batch carries little padding. With `group_ids` (b,), the rows of one prompt stay
    together (the forward computes a shared prompt once per micro-batch), groups ordered by their
    longest row. The losses use the mini-batch's denominators, so how rows are grouped does not change
    the summed gradient."""
    lengths = attention_mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    if group_ids is not None:
        _, group = torch.unique(group_ids, return_inverse=True)
        longest = torch.zeros(int(group.max()) + 1, dtype=lengths.dtype, device=lengths.device).scatter_reduce(0, group, lengths, "amax")
        for key in (group, longest[group]):  # successive stable sorts: by longest row, then group, then length
            order = order[torch.argsort(key[order], stable=True)]
    order = order.tolist()
    return [order[i : i + max(size, 1)] for i in range(0, len(order), max(size, 1))]


def minibatch_denominators(mask: torch.Tensor) -> tuple[float, float]:
    """(valid tokens, sequences with a valid token) of a mini-batch summed over ranks. mask: (b, R)."""
    counts = global_denominators([mask])
    tokens, seqs = all_reduce_sum(float(counts["tokens"]), float(counts["seqs"]))
    return tokens, seqs


# loss_fn(micro-batch, mini-batch denominators, first micro-batch of its mini-batch) -> (0-d loss, metrics)
LossFn = Callable[[RolloutBatch, tuple[float, float], bool], tuple[torch.Tensor, dict[str, float]]]


def minibatch_update(engine, batch: RolloutBatch, plan, loss_fn: LossFn, *, prefix: str, device,
                     hint: str = "") -> dict[str, float]:
    """`plan.update_iters` passes of optimizer steps of `engine` on `batch`; the averaged metrics.

    Each micro-batch reaches `loss_fn` on the model's `device` (moved once, here).

    Metrics combine as `metric_table` says: shares summed per optimizer step, others averaged (or their
    max/min taken) over micro-batches; then averaged over steps; `<prefix>/grad_norm` is the mean pre-clip norm.
    `hint` completes the error raised on a non-finite loss.
    """
    engine.module.train()
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    norms: list[float] = []
    for _ in range(plan.update_iters):
        for mini_idx in chunks(len(batch), plan.mini_batch_sequences_per_rank):
            mini = batch.select(mini_idx)
            denoms = minibatch_denominators(mini.loss_mask)
            micro = length_sorted_chunks(mini.attention_mask, plan.micro_batch_size, mini.group_ids)
            for k, idx in enumerate(micro):
                # Forward through the engine, not engine.module: ZeRO-3 counts micro-steps in the engine's
                # forward and would otherwise overwrite, not accumulate, the micro-batches' gradients.
                loss, metrics = loss_fn(to_model_device(mini.select(idx).trimmed(), device), denoms, k == 0)
                norm = backward_and_step(engine, loss, last=k == len(micro) - 1, hint=hint)
                accumulate(sums, counts, metrics)
            norms.append(norm)
    steps = max(len(norms), 1)
    out = {k: sums[k] / steps if reduction(k).micro == "share" else sums[k] / counts[k] for k in sums}
    out[f"{prefix}/grad_norm"] = sum(norms) / steps
    return out


def accumulate(sums: dict[str, float], counts: dict[str, int], metrics: dict[str, float]) -> None:
    """Fold one micro-batch's metrics into the running sums (a max/min is kept as one value)."""
    for key, v in metrics.items():
        how = reduction(key).micro
        if how in ("max", "min"):
            sums[key] = (max if how == "max" else min)(v, sums[key]) if counts[key] else v
            counts[key] = 1
        else:
            sums[key] += v
            counts[key] += 1
