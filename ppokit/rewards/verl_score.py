"""verl's custom reward signature, ``compute_score(data_source, solution_str, ground_truth, extra_info)``
returning a number or a dict with ``score``, called once per response (as verl's naive reward manager
does) so verl reward files work unchanged as ``reward_functions`` / ``custom_reward_function.path``."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from ppokit.rewards.errors import RewardError


def is_verl_compute_score(fn: Callable) -> bool:
    """True when ``fn`` takes verl's ``solution_str`` argument."""
    try:
        return "solution_str" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _ground_truth(reward_model, label):
    if isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
        return reward_model["ground_truth"]
    return label


def per_item(fn: Callable, name: str) -> Callable:
    """A ppokit reward function calling verl-style ``fn`` once per response."""
    def reward(prompts, responses, data_source=None, reward_model=None, extra_info=None, label=None, **_):
        n = len(responses)
        sources, models = data_source or [None] * n, reward_model or [None] * n
        extras, labels = extra_info or [None] * n, label or [None] * n
        scores = []
        for i, response in enumerate(responses):
            out = fn(data_source=sources[i], solution_str=response,
                     ground_truth=_ground_truth(models[i], labels[i]), extra_info=extras[i])
            if isinstance(out, dict):
                if "score" not in out:
                    raise RewardError(f"{name} returned a dict without 'score' (keys: {sorted(out)}); verl reads "
                                      "result['score']")
                out = out["score"]
            scores.append(out)
        return scores

    reward.__name__ = name
    return reward


def adapt(fn: Callable, name: str) -> Callable:
    """``fn`` itself, or its per-item wrapper when it has verl's signature."""
    return per_item(fn, name) if is_verl_compute_score(fn) else fn


def unknown_source_hint(records) -> str:
    """' The data's data_source ... has no built-in scorer ...' when records name sources without one, else ''."""
    from ppokit.tasks import VERL_DATA_SOURCES

    sources = sorted({str((r.get("fields") or {}).get("data_source")) for r in records or []
                      if (r.get("fields") or {}).get("data_source") is not None and not r.get("task")})
    if not sources:
        return ""
    return (f". The data's data_source {', '.join(repr(s) for s in sources[:3])} has no built-in scorer "
            f"(built in: {', '.join(VERL_DATA_SOURCES)}); give a verl-style compute_score with "
            "custom_reward_function.path=file.py (main_ppo) or reward_functions: 'file.py:compute_score'")
