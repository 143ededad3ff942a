"""How each metric combines: over the micro-batches of one optimizer step, and over data-parallel ranks.
The one table both the update loop (`training/update.py`) and the step's gather (`training/metrics.py`) read.

- `micro`: "share" — a micro-batch's share of a loss normalised by the whole mini-batch's denominators, summed
  per optimizer step (then averaged over the step's optimizer steps); "mean", "max" or "min" over micro-batches.
- `ranks`: "sum" (rank shares of a global-denominator loss, counters, throughput), "max" (the slowest rank sets
  the pace, the most rounds any rank needed), "min", or "mean" (weighted by each rank's sequences).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reduction:
    micro: str  # share | mean | max | min
    ranks: str  # sum | mean | max | min


SHARE = Reduction("share", "sum")
COUNT = Reduction("mean", "sum")
PEAK = Reduction("max", "max")

TABLE: dict[str, Reduction] = {
    **{key: SHARE for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/kl", "actor/kl_k1",
                              "actor/positive_lm_loss", "critic/value_loss")},
    **{key: COUNT for key in ("reward/skipped_groups", "groups/dropped_zero_std", "throughput/tokens_per_s")},
    **{key: PEAK for key in ("groups/gen_rounds", "memory/rss_gb", "memory/allocated_gb", "memory/peak_gb")},
}


def reduction(key: str) -> Reduction:
    """The table's entry for `key`; by its shape where the table has none (timing/*, */max, */min), else means."""
    if key in TABLE:
        return TABLE[key]
    if key.startswith("timing/") or key.endswith("/max"):
        return PEAK
    if key.endswith("/min"):
        return Reduction("min", "min")
    return Reduction("mean", "mean")
