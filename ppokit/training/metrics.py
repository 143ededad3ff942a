"""The step's metrics: `batch_metrics` and `sample_rows` of one batch, and the same over all ranks.

Every rank rolls out its own whole groups and computes its own metrics; `gather_metrics` turns
them into the step's global metrics, identical on every rank (so each rank's `history` agrees and
rank 0, the only one that logs, logs the whole step):

- batch statistics (reward/*, response_length/*, groups/zero_std_frac, per-reward-function
  means) are recomputed exactly from every rank's per-sequence scores, lengths, finish reasons
  and group ids — reward/mean is the mean over all ranks' sequences, reward/std their std;
- loss terms normalised by the global denominators (actor/pg_loss, actor/kl_loss, actor/entropy,
  actor/kl, critic/value_loss) are each rank's share of the mini-batch value and are summed;
- counters and throughput are summed, timings (the slowest rank sets the pace) and */max are the
  maximum, */min the minimum;
- everything else (clip fractions, advantage and KL means, the learning rate ...) is the mean over
  ranks weighted by each rank's number of sequences: exact for per-sequence means, a close
  approximation for per-token means when ranks hold different numbers of tokens.

Also here: `over_ranks` (one metric over ranks, e.g. the KL that drives the adaptive controller) and
`all_ranks_min`. With one process every collective here returns its input unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ppokit.algos.advantages import zero_std_groups
from ppokit.data.render import question_text
from ppokit.engine import collective_device, world_size
from ppokit.training.batch import RolloutBatch
from ppokit.training.metric_table import reduction


def reduction_for(key: str) -> str:
    """How a per-rank metric combines into the step's value: 'sum', 'max', 'min' or 'mean' (`metric_table`)."""
    return reduction(key).ranks


@dataclass
class SequenceFacts:
    """What `batch_metrics` reads from a RolloutBatch, for sequences of one or all ranks."""

    scores: torch.Tensor  # (B,)
    response_lengths: torch.Tensor  # (B,)
    finish_reasons: list[str]
    group_ids: torch.Tensor  # (B,) globally unique per prompt (offsets include the rank)
    reward_terms: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (B,)
    stats: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.finish_reasons)

    @classmethod
    def of(cls, batch) -> SequenceFacts:
        """The per-sequence facts of a scored RolloutBatch (on the CPU, float32)."""
        return cls(
            scores=batch.scores.detach().float().cpu(),
            response_lengths=batch.response_lengths.detach().float().cpu(),
            finish_reasons=list(batch.finish_reasons),
            group_ids=batch.group_ids.detach().cpu(),
            reward_terms={k: v.detach().float().cpu() for k, v in batch.reward_terms.items()},
        )

    @classmethod
    def concat(cls, parts: list[SequenceFacts]) -> SequenceFacts:
        """All ranks' sequences as one (reward terms every rank has; a missing one is an error)."""
        names = list(parts[0].reward_terms)
        if any(list(p.reward_terms) != names for p in parts):
            raise RuntimeError(
                f"ranks computed different reward terms ({[list(p.reward_terms) for p in parts]}); every rank "
                "must run the same reward functions with the same arguments."
            )
        return cls(
            scores=torch.cat([p.scores for p in parts]),
            response_lengths=torch.cat([p.response_lengths for p in parts]),
            finish_reasons=[r for p in parts for r in p.finish_reasons],
            group_ids=torch.cat([p.group_ids for p in parts]),
            reward_terms={k: torch.cat([p.reward_terms[k] for p in parts]) for k in names},
        )


def combine(values: list[float], weights: list[float], how: str) -> float:
    """One metric from its per-rank values (NaN-free weights; a rank without the key is left out)."""
    if how == "sum":
        return float(sum(values))
    if how == "max":
        return float(max(values))
    if how == "min":
        return float(min(values))
    total = sum(weights)
    if total <= 0:
        return float(sum(values) / len(values))
    return float(sum(v * w for v, w in zip(values, weights)) / total)


def reduce_rank_metrics(per_rank: list[dict[str, float]], weights: list[float]) -> dict[str, float]:
    """Combine per-rank metric dicts key by key (see `reduction_for`); keys keep the first rank's order."""
    keys = list(dict.fromkeys(k for metrics in per_rank for k in metrics))
    out = {}
    for key in keys:
        have = [(float(m[key]), w) for m, w in zip(per_rank, weights) if key in m]
        out[key] = combine([v for v, _ in have], [w for _, w in have], reduction_for(key))
    return out


def gather_metrics(metrics: dict[str, float], batch=None) -> dict[str, float]:
    """The step's metrics over all ranks (see the module docstring); the same dict on every rank.

    metrics: this rank's metrics (update stats, `batch_metrics(batch)`, timings). batch: this rank's
    scored RolloutBatch, whose sequences give the exact reward and length statistics. A collective:
    every rank must call it once per step. One process: `metrics` is returned unchanged.
    """
    if world_size() == 1:
        return metrics
    facts = SequenceFacts.of(batch) if batch is not None and batch.scores is not None else None
    payload = {"metrics": dict(metrics), "facts": facts, "n": len(batch) if batch is not None else 0}
    gathered: list = [None] * world_size()
    dist.all_gather_object(gathered, payload)
    weights = [float(p["n"]) for p in gathered]
    out = reduce_rank_metrics([p["metrics"] for p in gathered], weights)
    if all(p["facts"] is not None for p in gathered):
        out.update(batch_metrics(SequenceFacts.concat([p["facts"] for p in gathered])))
    return {key: out[key] for key in dict.fromkeys([*metrics, *out])}


def over_ranks(key: str, value: float | None, weight: int) -> tuple[float | None, int]:
    """(`key`'s value over all ranks as `gather_metrics` combines it, total weight): e.g. the observed
    KL that drives the adaptive KL controller, so every rank keeps the same beta. A collective; a
    value that is None on every rank stays None. One process: (value, weight)."""
    if world_size() == 1:
        return value, weight
    gathered: list = [None] * world_size()
    dist.all_gather_object(gathered, (value, int(weight)))
    total = sum(w for _, w in gathered)
    have = [(float(v), float(w)) for v, w in gathered if v is not None]
    if not have:
        return None, total
    return combine([v for v, _ in have], [w for _, w in have], reduction_for(key)), total


def all_ranks_min(value: int) -> int:
    """The smallest `value` over ranks (a collective; `value` itself with one process)."""
    if world_size() == 1:
        return value
    t = torch.tensor([int(value)], dtype=torch.long, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def batch_metrics(batch: RolloutBatch) -> dict[str, float]:
    """reward/*, response_length/*, groups/* and the phase timings recorded on the batch."""
    scores = batch.scores.float()
    lengths = batch.response_lengths.float()
    out = {
        "reward/mean": float(scores.mean()),
        "reward/std": float(scores.std()) if len(scores) > 1 else 0.0,
        "reward/max": float(scores.max()),
        "reward/min": float(scores.min()),
        "response_length/mean": float(lengths.mean()),
        "response_length/max": float(lengths.max()),
        "response_length/clip_ratio": sum(r == "length" for r in batch.finish_reasons) / max(len(batch), 1),
        "groups/zero_std_frac": len(zero_std_groups(scores, batch.group_ids)) / max(len(torch.unique(batch.group_ids)), 1),
    }
    for name, values in batch.reward_terms.items():
        out[f"reward/{name}"] = float(values.float().nanmean())
    out.update(batch.stats)
    return out


def sample_rows(batch: RolloutBatch, limit: int = 4) -> list[dict]:
    """A few (prompt, response, reward, advantage) rows for VisualDL text and samples.jsonl."""
    from ppokit.rollout.agent_loop import is_exchange, turns_text

    rows, exchange = [], is_exchange(batch.turns, batch.score_fields)
    for i in range(min(limit, len(batch))):
        row = {"question": question_text(batch.records[i], batch.prompt_texts[i]), "prompt": batch.prompt_texts[i],
               "response": batch.response_texts[i], "reward": float(batch.scores[i])}
        if batch.advantages is not None:
            row["advantage"] = float(batch.advantages[i][batch.loss_mask[i] > 0][:1].sum())
        row.update({f"reward/{k}": float(v[i]) for k, v in batch.reward_terms.items()})
        row.update(batch.reward_notes[i] if batch.reward_notes else {})  # e.g. the judge's verdict
        if exchange:  # a view: the final answer, the marked exchange and its segments
            row["answer"], row["response"] = row["response"], turns_text(batch.turns[i])
            row["turns"] = [{"role": t["role"], "text": t["text"]} for t in batch.turns[i]]
        rows.append(row)
    return rows
