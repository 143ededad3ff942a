"""The one scoring rule: training's `score` phase, evaluation (`Session.evaluate`, `python -m ppokit.eval`) and the
reward server's function scorer all compute a response's reward here, so an eval number means what the training
reward means.

    total, per_fn = score_responses(fns, prompts, answers, records, score_fields, rollout_rewards)

`answers` are the final answers (a multi-turn row's last model turn); `score_fields[j]` the fields the rollout adds
for row j (a multi-turn row's `conversation`, which a reward function may name as a keyword); `rollout_rewards` the
terms the rollout itself earned (the tools' step rewards, `tool_step`), added to the total and reported as
`reward/<name>` like every reward function. Training-only shaping (DAPO's overlong penalty, normalisation,
clipping) is applied after this by training's `score` phase and is not part of a response's reward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ppokit.rewards.functions import NamedReward, compute_rewards


def with_fields(record: dict, extra: dict | None) -> dict:
    """The record a reward function sees: its `fields` plus the rollout's extra fields for the row."""
    if not extra:
        return record
    return {**record, "fields": {**(record.get("fields") or {}), **extra}}


def score_responses(fns: Sequence[NamedReward], prompts: Sequence[str], answers: Sequence[str],
                    records: Sequence[dict], score_fields: Sequence[dict] | None = None,
                    rollout_rewards: Mapping | None = None):
    """(total (B,) float32, {name: (B,)}): the reward functions' weighted sum plus the rollout's own terms.

    A term of `rollout_rewards` (a (B,) tensor) must not share a reward function's name (a RewardError)."""
    rows = list(records) if not score_fields else [with_fields(r, f) for r, f in zip(records, score_fields)]
    total, per_fn = compute_rewards(fns, prompts, answers, rows)
    for name, values in (rollout_rewards or {}).items():
        if name in per_fn:
            from ppokit.rewards.errors import RewardError

            raise RewardError(f"a reward function is named {name!r}, which is the name of the rollout's own reward "
                              "term (the tools' step rewards); rename the function")
        per_fn[name] = values
        total = total + values
    return total, per_fn
