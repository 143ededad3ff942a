"""The judge reward source from the arguments (`judge_*` keys) or from `reward_server.py --judge`."""

from __future__ import annotations

from typing import Any

from ppokit.args.judge import JudgeArguments
from ppokit.rewards.errors import RewardError
from ppokit.rewards.functions import NamedReward
from ppokit.rewards.judge.reward import JudgeReward
from ppokit.rewards.judge.templates import load_template

BACKENDS = ("hf", "vllm", "openai")


def _attr(args: Any, name: str, default: Any = None) -> Any:
    """``args.name``; when missing or None, a judge key's declared default (JudgeArguments), else ``default``."""
    value = getattr(args, name, None)
    if value is None and name in JudgeArguments.model_fields:
        value = JudgeArguments.model_fields[name].get_default()
    return default if value is None else value


def backend_of(model: str, backend: str | None) -> str:
    """judge_backend, else openai for an http(s) URL and hf (transformers in this process) for anything else."""
    if backend:
        if backend not in BACKENDS:
            raise RewardError(f"judge_backend is {backend!r}; use one of {', '.join(BACKENDS)}")
        return backend
    return "openai" if model.startswith(("http://", "https://")) else "hf"


def judge_client(model: str, backend: str | None = None, *, api_model: str | None = None, max_new_tokens: int = 256,
                 temperature: float = 0.0, seed: int = 0, batch_size: int = 8, concurrency: int = 8,
                 timeout: float = 60.0, max_retries: int = 3, allow_remote: bool = False, token: str | None = None,
                 want_probs: bool = False):
    """The client for `model` (a URL, a folder, a .gguf file or an alias); a load failure is a RewardError."""
    from ppokit.rewards.judge import clients as jc

    kind = backend_of(model, backend)
    try:
        if kind == "openai":
            return jc.HttpJudge(model, api_model=api_model, max_new_tokens=max_new_tokens, temperature=temperature,
                                seed=seed, concurrency=concurrency, timeout=timeout, max_retries=max_retries,
                                token=token, allow_remote=allow_remote, want_probs=want_probs)
        if kind == "vllm":
            from ppokit.rewards.judge.vllm_judge import VllmJudge

            return VllmJudge(model, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
        return jc.LocalJudge(model, max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size,
                             seed=seed)
    except RewardError:
        raise
    except Exception as exc:  # a missing model, a bad URL: one sentence naming the judge
        raise RewardError(f"the judge model {model!r} ({kind}) cannot be used: {exc}") from exc


def judge_reward(args: Any) -> NamedReward:
    """The `judge` NamedReward that `judge_model` and the other judge_* keys describe."""
    model = _attr(args, "judge_model")
    on_error = _attr(args, "reward_on_error", "raise")
    client = judge_client(
        model, _attr(args, "judge_backend"), api_model=_attr(args, "judge_api_model"),
        max_new_tokens=int(_attr(args, "judge_max_new_tokens")),
        temperature=float(_attr(args, "judge_temperature")), seed=int(_attr(args, "seed", 0)),
        batch_size=int(_attr(args, "judge_batch_size")), concurrency=int(_attr(args, "judge_concurrency")),
        timeout=float(_attr(args, "reward_timeout", 60.0)), max_retries=int(_attr(args, "reward_max_retries", 3)),
        allow_remote=bool(_attr(args, "judge_allow_remote")), want_probs=_attr(args, "judge_parser") == "p_yes")
    return NamedReward(name="judge", fn=make_judge(client, args), allow_none=on_error == "skip_group",
                       locate_errors=False, advice=f"check the judge ({model}): the 'judge:' warnings above name each "
                       "answer it could not score and why (a failed call, or a verdict that did not parse)")


def make_judge(client, args: Any) -> JudgeReward:
    """A JudgeReward on `client` with the template, parser, rubric and error policy of `args`."""
    try:
        template = load_template(_attr(args, "judge_template"), _attr(args, "judge_parser"))
    except (ValueError, OSError) as exc:
        raise RewardError(str(exc)) from exc
    low, high = _attr(args, "judge_score_range")
    return JudgeReward(client, template, rubric=_attr(args, "judge_rubric"),
                       on_error=_attr(args, "reward_on_error", "raise"), score_range=(float(low), float(high)))
