"""Scorers the reward server runs: built-in tasks (detected per item), a `file.py:fn` RewardFn, or a
sequence-classification reward model.

A scorer is any callable `scorer(items) -> list[(score, details)]` taking items
`{"prompt", "response", "label", "task", "fields"}` and returning one finite float and a dict of
details per item. It raises `RewardError` (with `.index` when one item is to blame) on failure.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ppokit.rewards.detect import detect_task
from ppokit.rewards.errors import RewardError, UnscorableRequest
from ppokit.rewards.functions import NamedReward, load_reward_function
from ppokit.rewards.scoring import score_responses

Scored = tuple[float, dict]


class Scorer(Protocol):
    def __call__(self, items: list[dict]) -> list[Scored]: ...


def _default_get_task(name: str):
    from ppokit import tasks

    return tasks.get(name)


def _item_record(i: int, item: dict, task: str) -> dict:
    return {
        "prompt": item.get("prompt") or "",
        "label": item.get("label"),
        "task": task,
        "source": f"request item {i}",
        "fields": dict(item.get("fields") or {}),
    }


def task_scorer(task: str | None = None, get_task: Callable | None = None) -> Scorer:
    """Score each item with a built-in task's verifier: `task` if given, else the item's own `task`,
    else the task `detect_task` recognises from its prompt and label."""
    lookup = get_task or _default_get_task
    cache: dict[str, Any] = {}

    def score(items: list[dict]) -> list[Scored]:
        out: list[Scored] = []
        for i, item in enumerate(items):
            name = task or item.get("task") or detect_task(item.get("prompt") or "", item.get("label"))
            if name not in cache:
                try:
                    cache[name] = lookup(name)
                except Exception as exc:  # the request's fault: a 4xx, not a failure worth retrying
                    raise UnscorableRequest(f"item {i} names task {name!r}, which this server cannot score: {exc}",
                                            index=i) from exc
            try:
                result = cache[name].score(item.get("response") or "", _item_record(i, item, name), details=True)
            except Exception as exc:
                raise RewardError(f"scoring item {i} (task {name!r}) failed: {type(exc).__name__}: {exc}",
                                  index=i) from exc
            value, details = result if isinstance(result, tuple) else (result, {})
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise RewardError(f"task {name!r} gave {value!r} for item {i}; a score must be a finite number",
                                  index=i)
            out.append((float(value), {"task": name, **(details or {})}))
        return out

    return score


def function_scorer(reward: NamedReward) -> Scorer:
    """Score items with a RewardFn (all of them in one call) by training's rule (`score_responses`: the server's
    items are final answers with no conversation, so the rule is the reward function's value)."""

    def score(items: list[dict]) -> list[Scored]:
        records = [_item_record(i, item, item.get("task")) for i, item in enumerate(items)]
        try:
            total, _ = score_responses([reward], [r["prompt"] for r in records],
                                       [item.get("response") or "" for item in items], records)
        except RewardError as exc:
            index = exc.index
            where = f"item {index}: " if index is not None else ""
            raise RewardError(f"{where}{exc}", index=index) from exc
        return [(float(v), {}) for v in total.tolist()]

    return score


def model_scorer(path: str, batch_size: int = 8, device: str | None = None) -> Scorer:
    """Score prompt + response with a sequence-classification reward model (one model, one lock)."""
    from ppokit.rewards.model_reward import ModelReward

    model = ModelReward(path, batch_size=batch_size, device=device)
    lock = threading.Lock()
    inner = function_scorer(NamedReward(name="reward_model", fn=model, locate_errors=False))

    def score(items: list[dict]) -> list[Scored]:
        with lock:
            return inner(items)

    return score


def judge_scorer(judge) -> Scorer:
    """Score items with a JudgeReward (ppokit.rewards.judge); each item's details carry its verdict and the judge's
    tokens. Unparsed verdicts and failed judge calls are a RewardError (HTTP 500 naming the item), so the training
    side's client counts them and follows its own reward_on_error. One request at a time reaches the judge."""
    lock = threading.Lock()

    def score(items: list[dict]) -> list[Scored]:
        records = [_item_record(i, item, item.get("task")) for i, item in enumerate(items)]
        rubric = [(r["fields"] or {}).get("rubric") for r in records]
        with lock:
            values = judge([r["prompt"] for r in records], [item.get("response") or "" for item in items],
                           label=[r["label"] for r in records], records=records, rubric=rubric)
            report = judge.take_report()
        notes = report.notes if report is not None else [{} for _ in items]
        return [(float(v), dict(note)) for v, note in zip(values, notes)]

    return score


def build_scorer(task: str | None = None, function: str | None = None, model: str | None = None,
                 get_task: Callable | None = None, judge: str | None = None, judge_options: dict | None = None) -> Scorer:
    """The scorer for `reward_server.py`'s --task / --function / --model / --judge (at most one; none = detect
    tasks). judge_options: judge_* keys (judge_template, judge_parser, judge_rubric, ...) and their values."""
    given = [name for name, v in (("--task", task), ("--function", function), ("--model", model),
                                  ("--judge", judge)) if v]
    if len(given) > 1:
        raise RewardError(f"choose one scorer, not {' and '.join(given)}")
    if judge:
        from types import SimpleNamespace

        from ppokit.rewards.judge.build import judge_reward

        options = dict(judge_options or {})
        return judge_scorer(judge_reward(SimpleNamespace(**{**options, "judge_model": judge,
                                                            "reward_on_error": "raise"})).fn)
    if function:
        return function_scorer(load_reward_function(function))
    if model:
        return model_scorer(model)
    if task:
        (get_task or _default_get_task)(task)  # fail now, not on the first request
    return task_scorer(task, get_task=get_task)
