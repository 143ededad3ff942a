"""What reward sources report beside their values: step metrics and per-answer notes for samples.jsonl.

A reward function may have a `take_report()` method returning an object with `metrics` (dict name -> float, e.g.
`reward/judge_unparsed`, `timing/judge_s`) and `notes` (one dict per answer of its last batch, e.g.
`{"judge_verdict": ...}`), or None. `take_reports` collects them right after `compute_rewards`.
"""

from __future__ import annotations

from collections.abc import Sequence


def take_reports(fns: Sequence, n: int) -> tuple[dict[str, float], list[dict]]:
    """(metrics summed over sources, one merged notes dict per answer) of the last batch of `fns` (NamedRewards)."""
    metrics: dict[str, float] = {}
    notes: list[dict] = [{} for _ in range(n)]
    for reward in fns:
        take = getattr(reward.fn, "take_report", None) or getattr(getattr(reward.fn, "__self__", None),
                                                                   "take_report", None)
        report = take() if callable(take) else None
        if report is None:
            continue
        for key, value in report.metrics.items():
            metrics[key] = metrics.get(key, 0.0) + float(value)
        if len(report.notes) == n:
            for row, note in zip(notes, report.notes):
                row.update(note)
    return metrics, notes
