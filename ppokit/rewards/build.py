"""`build_reward_functions(args)`: the one place that reads the Arguments object.

The rule (every configured source is either scored or named in a start-up note; the scored ones are summed
with `reward_weights` and each is logged as `reward/<name>`). Order of the returned list (which is also the
order `reward_weights` refers to):
  1. `rule` — the task verifiers, when `use_rule_reward` is true, or implicitly when no other source is
     configured (no reward_functions, use_rm_server or reward_model_name_or_path) and the records carry a
     `task` or the `task` argument names a default task;
  2. each `reward_functions` entry (`file.py:fn`), named by its function;
  3. `judge` — the LLM judge (`judge_model` and the `judge_*` keys; ppokit.rewards.judge), when judge_model is set;
  4. `reward_server` — the HTTP client, when `use_rm_server` is true;
  5. `reward_model` — a sequence-classification reward model at `reward_model_name_or_path`, scored in
     batches of `per_device_reward_batch_size`, unless `use_rule_reward` or `use_rm_server` is true (as in
     PaddleNLP, which loads no reward model then; for PPO the path still initialises the critic). An explicit
     reward model is never replaced by a `task` field in the data.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ppokit.args.judge import JudgeArguments
from ppokit.rewards.errors import RewardError
from ppokit.rewards.functions import NamedReward, make_rule_reward, parse_reward_functions, with_deadline
from ppokit.rewards.verl_score import unknown_source_hint

logger = logging.getLogger("ppokit")


def _attr(args: Any, name: str, default: Any = None) -> Any:
    value = getattr(args, name, None)
    return default if value is None else value


def _server_reward(args: Any) -> NamedReward:
    from ppokit.rewards.client import RewardServerClient

    url = _attr(args, "reward_server")
    if not url:
        raise RewardError(
            "use_rm_server is true but reward_server is not set; start `python reward_server.py` and set "
            'reward_server: "http://127.0.0.1:8731"'
        )
    on_error = _attr(args, "reward_on_error", "raise")
    if on_error not in ("raise", "skip_group"):
        raise RewardError(f"reward_on_error is {on_error!r}; use 'raise' or 'skip_group'")
    client = RewardServerClient(
        url,
        token=_attr(args, "reward_server_token"),  # else the client reads PPOKIT_REWARD_TOKEN
        timeout=float(_attr(args, "reward_timeout", 60.0)),
        max_retries=int(_attr(args, "reward_max_retries", 3)),
        protocol=_attr(args, "reward_server_protocol", "paddle"),
    )
    skip = on_error == "skip_group"
    return NamedReward(
        name="reward_server",
        fn=client.score_or_none if skip else client,
        allow_none=skip,
        locate_errors=False,
        advice=f"check that the reward server at {url} is up and answering (the warnings above and its log say why "
               "it was not)",
    )


def in_process_deadline(fns: list[NamedReward], args: Any) -> list[NamedReward]:
    """The rule and `file.py:fn` functions under `reward_timeout` per batch call, with the server's retry and
    `reward_on_error` policy (a hung function would otherwise stall the run without a word)."""
    timeout = float(_attr(args, "reward_timeout", 60.0))
    retries = int(_attr(args, "reward_max_retries", 3))
    skip = _attr(args, "reward_on_error", "raise") == "skip_group"
    return [with_deadline(f, timeout, retries, skip) for f in fns]


def _unique(fns: list[NamedReward]) -> list[NamedReward]:
    seen: dict[str, int] = {}
    out = []
    for f in fns:
        seen[f.name] = seen.get(f.name, 0) + 1
        name = f.name if seen[f.name] == 1 else f"{f.name}_{seen[f.name]}"
        out.append(f if name == f.name else replace(f, name=name))
    return out


def _weighted(fns: list[NamedReward], weights: Sequence[float] | None) -> list[NamedReward]:
    if weights is None:
        return fns
    weights = list(weights)
    if len(weights) != len(fns):
        names = [f.name for f in fns]
        raise RewardError(
            f"reward_weights has {len(weights)} values but there are {len(fns)} reward functions "
            f"{names}; give one weight per function, in that order"
        )
    return [replace(f, weight=float(w)) for f, w in zip(fns, weights)]


def build_reward_functions(args: Any, records: Sequence[dict] | None = None, base_dir: str | None = None) -> list[NamedReward]:
    """The reward functions `args` asks for (see the module docstring for the rules and order).

    records: the training records, when known; a record carrying `task` turns the rule reward on
    when no other source is configured. base_dir: where relative `reward_functions` paths are also looked for.
    """
    custom = parse_reward_functions(_attr(args, "reward_functions"), base_dir=base_dir)
    use_server = bool(_attr(args, "use_rm_server", False))
    default_task = _attr(args, "task")
    has_tasks = any(r.get("task") for r in records or [])
    model_path = _attr(args, "reward_model_name_or_path")
    explicit_rule = bool(_attr(args, "use_rule_reward", False))
    judge = _attr(args, "judge_model")
    use_rule = explicit_rule or (not custom and not use_server and not model_path and not judge
                                 and (has_tasks or bool(default_task)))
    fns: list[NamedReward] = []
    if use_rule:
        fns.append(NamedReward(name="rule", fn=make_rule_reward(default_task)))
    fns.extend(custom)
    fns = in_process_deadline(fns, args)
    if judge:  # its calls have their own timeouts and error policy (reward_timeout, reward_on_error)
        from ppokit.rewards.judge.build import judge_reward

        fns.append(judge_reward(args))
    if use_server:
        fns.append(_server_reward(args))
    if model_path and not explicit_rule and not use_server:
        from ppokit.rewards.model_reward import ModelReward

        batch = int(_attr(args, "per_device_reward_batch_size", 0)) or 8
        fns.append(NamedReward(name="reward_model", fn=ModelReward(model_path, batch_size=batch), locate_errors=False))
    if not fns:
        raise RewardError(
            "no reward is configured; set use_rule_reward (each record's `task`, the `task` argument, or "
            "the task detected from prompt and label), reward_functions: 'file.py:fn', use_rm_server with "
            "reward_server, judge_model, or reward_model_name_or_path" + unknown_source_hint(records)
        )
    fns = _weighted(_unique(fns), _attr(args, "reward_weights"))
    _announce(fns, args, use_rule and not explicit_rule)
    return fns


def _announce(fns: list[NamedReward], args: Any, implicit_rule: bool) -> None:
    """Log which reward sources are scored, and any configured source that is not."""
    judge_template = _attr(args, "judge_template", JudgeArguments.model_fields["judge_template"].default)
    why = {"rule": "use_rule_reward" if not implicit_rule else "the records' task field / the task argument",
           "reward_server": f"use_rm_server, {_attr(args, 'reward_server')}",
           "reward_model": f"reward_model_name_or_path {_attr(args, 'reward_model_name_or_path')}",
           "judge": f"judge_model {_attr(args, 'judge_model')}, template {judge_template}"}
    listed = "; ".join(f"reward/{f.name} (weight {f.weight:g}, {why.get(f.name, 'reward_functions')})" for f in fns)
    logger.info("reward sources: %s%s", listed, "; the reward is their weighted sum" if len(fns) > 1 else "")
    model_path = _attr(args, "reward_model_name_or_path")
    if model_path and not any(f.name == "reward_model" for f in fns):
        instead = "use_rm_server" if _attr(args, "use_rm_server", False) else "use_rule_reward"
        logger.info("reward_model_name_or_path %s is not scored because %s is true (as in PaddleNLP)%s.", model_path,
                    instead, "; it still initialises the critic" if _attr(args, "rl_algorithm") == "ppo" else "")
