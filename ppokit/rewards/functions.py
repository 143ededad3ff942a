"""Reward functions run in process: the protocol, the rule reward, custom `file.py:fn` functions, and
`compute_rewards`, which runs several of them, checks every value and combines them with weights.

A reward function is any callable

    fn(prompts: list[str], responses: list[str], **fields) -> list[float]

where `fields` are per-item lists built from the records: `label`, `task`, `source`, `records` (the
record dicts themselves) and every key of the records' `fields` (None where a record lacks it). A
function that does not take `**kwargs` receives only the fields its signature names.

Nothing here fails silently: an exception, a NaN/inf/None/non-number or the wrong number of values is
a `RewardError` naming the function and the record (index and `source`). A function given a `timeout` runs in
a worker thread; a call that takes longer is abandoned (the thread is left to finish on its own), retried
`retries` times, then a RewardError, or, with `skip_on_timeout` (reward_on_error: skip_group), the batch's
groups are dropped as the reward server client does. Ctrl-C while a function runs is the user's interrupt
(KeyboardInterrupt goes through), never blamed on the function.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ppokit.rewards.errors import RewardError
from ppokit.userfile import import_user_file

_log = logging.getLogger("ppokit")

if TYPE_CHECKING:  # torch is imported when rewards are combined, so the server can run without it
    import torch

RESERVED_FIELDS = ("label", "task", "source", "records")
FLOAT32_MAX = 3.4028234663852886e38  # rewards are combined and trained in float32; larger values become inf


class RewardFn(Protocol):
    def __call__(self, prompts: list[str], responses: list[str], **fields: list) -> list[float]: ...


@dataclass(frozen=True)
class NamedReward:
    """A reward function with the name it is logged under (`reward/<name>`) and its weight.

    allow_none: the function may return None for an item it could not score (only the reward server
        client under `reward_on_error: skip_group`); that item's reward becomes NaN, see `skipped_groups`.
    locate_errors: when the function raises on a batch, call it again one record at a time to name the
        record that fails (off for the server client, whose errors already say what failed).
    timeout: seconds one batch call may take (`reward_timeout`); None runs it in the calling thread, unbounded.
    retries: how often a timed-out call is tried again (`reward_max_retries`).
    skip_on_timeout: after the last timed-out try, the batch's items get None (their groups are dropped)
        instead of a RewardError (`reward_on_error: skip_group`).
    advice: what to check when it gives no reward (said when every group of a step failed under skip_group).
    """

    name: str
    fn: Callable[..., Sequence[Any]]
    weight: float = 1.0
    allow_none: bool = False
    locate_errors: bool = True
    timeout: float | None = None
    retries: int = 0
    skip_on_timeout: bool = False
    advice: str = ""


class RewardTimeout(RewardError):
    """A reward function's batch call took longer than its timeout on every try."""


def with_deadline(reward: NamedReward, timeout: float | None, retries: int, skip: bool) -> NamedReward:
    advice = f"reward function {reward.name!r} timed out (see the warnings above): make it faster, or raise reward_timeout"
    return replace(reward, timeout=timeout, retries=retries, skip_on_timeout=skip, advice=reward.advice or advice)


# ---------------------------------------------------------------- fields and calling


def record_fields(records: Sequence[dict]) -> dict[str, list]:
    """Per-item lists from records: label, task, source, records, then each extra field (None if absent)."""
    records = list(records)
    fields: dict[str, list] = {
        "label": [r.get("label") for r in records],
        "task": [r.get("task") for r in records],
        "source": [r.get("source") for r in records],
        "records": records,
    }
    extra_keys: list[str] = []
    for r in records:
        for key in r.get("fields") or {}:
            if key not in extra_keys and key not in RESERVED_FIELDS and key not in ("prompts", "responses"):
                extra_keys.append(key)
    for key in extra_keys:
        fields[key] = [(r.get("fields") or {}).get(key) for r in records]
    return fields


def _accepted(fn: Callable, fields: dict[str, list]) -> dict[str, list]:
    """The fields `fn` can take: all of them with **kwargs, else only those its signature names."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fields
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return fields
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in fields.items() if k in names}


def _subset(fields: dict[str, list], i: int) -> dict[str, list]:
    return {k: v[i : i + 1] for k, v in fields.items()}


def _where(i: int, records: Sequence[dict]) -> str:
    source = records[i].get("source") if i < len(records) else None
    return f"record {i} (source {source!r})" if source else f"record {i}"


def _deadline(reward: NamedReward, call: Callable[[], Sequence[Any]]) -> Sequence[Any]:
    """`call()` within `reward.timeout` seconds in a worker thread, retried `reward.retries` times on timeout;
    RewardTimeout after the last try. Without a timeout, `call()` here. Its exception is raised here."""
    if not reward.timeout:
        return call()
    tries = reward.retries + 1
    for attempt in range(1, tries + 1):
        box: dict[str, Any] = {}
        done = threading.Event()

        def work(box=box, done=done):
            try:
                box["value"] = call()
            except BaseException as exc:  # carried to the caller's thread
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=work, name=f"reward-{reward.name}", daemon=True).start()
        if done.wait(reward.timeout):  # Ctrl-C interrupts this wait in the main thread
            error = box.get("error")
            if isinstance(error, ValueError) and "main thread" in str(error):
                # the function uses signal.alarm (as some math verifiers do), which works in the main thread only
                _log.warning("reward function %r needs the main thread (%s); it runs there without reward_timeout",
                             reward.name, error)
                return call()
            if error is not None:
                raise error
            return box["value"]
        _log.warning("reward function %r: try %d/%d took longer than reward_timeout=%gs and was abandoned",
                     reward.name, attempt, tries, reward.timeout)
    raise RewardTimeout(f"did not return within reward_timeout={reward.timeout:g} s on any of {tries} tries "
                        "(the calls were abandoned); make it faster, raise reward_timeout, or set reward_on_error: "
                        "skip_group to drop such batches")


SKIPPED = object()  # what `_call` returns for a batch that timed out under `skip_on_timeout`


def _call(reward: NamedReward, prompts, responses, fields, records) -> Any:
    """The function's values for the batch; SKIPPED when it timed out under `skip_on_timeout`."""
    kwargs = _accepted(reward.fn, fields)
    try:
        return _deadline(reward, lambda: reward.fn(list(prompts), list(responses), **kwargs))
    except KeyboardInterrupt:  # the user's Ctrl-C, not the function's fault
        raise
    except RewardTimeout as exc:
        if reward.skip_on_timeout:
            _log.warning("reward function %r: %d items skipped (reward_on_error: skip_group): %s", reward.name,
                         len(responses), exc)
            return SKIPPED
        raise RewardError(f"reward function {reward.name!r} {exc}") from None
    except RewardError as exc:
        raise RewardError(f"reward function {reward.name!r}: {exc}", exc.index, exc.source) from exc
    except BaseException as exc:  # SystemExit too: a user function must not end the run silently
        if reward.locate_errors and len(responses) > 1 and isinstance(exc, Exception):
            _locate(reward, prompts, responses, kwargs, records, exc)
        where = _where(0, records) if len(responses) == 1 else f"a batch of {len(responses)} records"
        raise RewardError(
            f"reward function {reward.name!r} raised {type(exc).__name__}: {exc} on {where}; "
            "fix the function or the data it was given",
            0 if len(responses) == 1 else None,
            records[0].get("source") if len(responses) == 1 and records else None,
        ) from exc


def _locate(reward: NamedReward, prompts, responses, kwargs, records, exc: BaseException) -> None:
    """Call the function one record at a time to name the record that fails (RewardError); returns if none does."""
    for i in range(len(responses)):
        try:
            _deadline(reward, lambda i=i: reward.fn(list(prompts[i : i + 1]), list(responses[i : i + 1]),
                                                    **_subset(kwargs, i)))
        except KeyboardInterrupt:
            raise
        except RewardTimeout:
            return
        except BaseException as one:
            raise RewardError(
                f"reward function {reward.name!r} raised {type(one).__name__}: {one} "
                f"on {_where(i, records)}; fix the function or that record",
                i,
                records[i].get("source"),
            ) from exc


# ---------------------------------------------------------------- checking values


def _as_list(reward: NamedReward, values: Any, n: int) -> list:
    if hasattr(values, "detach") and hasattr(values, "dim"):  # a torch tensor
        values = values.detach().cpu().reshape(-1).tolist() if values.dim() <= 1 else values
    elif hasattr(values, "tolist") and getattr(values, "ndim", None) == 1:  # a 1-D numpy array
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise RewardError(
            f"reward function {reward.name!r} returned {type(values).__name__} instead of a list of "
            f"{n} floats (one per response)"
        )
    if len(values) != n:
        raise RewardError(
            f"reward function {reward.name!r} returned {len(values)} values for {n} responses; "
            "it must return exactly one float per response, in order"
        )
    return list(values)


def _to_float(value: Any) -> float | None:
    """float(value) for a real number (0-d tensors/arrays too); None for anything else."""
    if hasattr(value, "numel") and hasattr(value, "item"):  # a torch tensor
        value = value.item() if value.numel() == 1 else value
    elif hasattr(value, "item") and getattr(value, "size", None) == 1:  # a numpy scalar or 0-d array
        value = value.item()
    if isinstance(value, numbers.Real):
        return float(value)
    return None


def check_values(reward: NamedReward, values: Any, records: Sequence[dict]) -> list[float | None]:
    """The function's output as floats, or a RewardError naming the function and the bad record."""
    out: list[float | None] = []
    for i, value in enumerate(_as_list(reward, values, len(records))):
        if value is None and reward.allow_none:
            out.append(None)
            continue
        number = _to_float(value)
        if value is None or number is None:
            got = "None" if value is None else f"{type(value).__name__} {value!r:.60}"
            raise RewardError(
                f"reward function {reward.name!r} returned {got} for {_where(i, records)}; "
                "a reward must be a finite number",
                i,
                records[i].get("source"),
            )
        if not math.isfinite(number) or abs(number) > FLOAT32_MAX:
            raise RewardError(
                f"reward function {reward.name!r} returned {number} for {_where(i, records)}; "
                f"a reward must be a finite number in float32, the training dtype (|r| <= {FLOAT32_MAX:.3g})",
                i,
                records[i].get("source"),
            )
        out.append(number)
    return out


# ---------------------------------------------------------------- compute_rewards


def compute_rewards(
    fns: Sequence[NamedReward],
    prompts: Sequence[str],
    responses: Sequence[str],
    records: Sequence[dict],
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Run every reward function on the batch and combine them.

    Returns (total, per_fn): total (B,) float32 = sum of weight * values; per_fn maps each function's
    name to its unweighted values (B,) for logging as `reward/<name>`. An item a skip-capable function
    could not score (None) is NaN in both; see `skipped_groups`. Raises RewardError otherwise.
    """
    import torch

    n = len(responses)
    if len(prompts) != n or len(records) != n:
        raise RewardError(
            f"compute_rewards got {len(prompts)} prompts, {n} responses and {len(records)} records; "
            "they must be parallel lists of the same length"
        )
    if not fns:
        raise RewardError(
            "no reward function is configured; set use_rule_reward, reward_functions, "
            "use_rm_server + reward_server, or reward_model_name_or_path"
        )
    names = [f.name for f in fns]
    dupes = sorted({x for x in names if names.count(x) > 1})
    if dupes:
        raise RewardError(f"two reward functions share the name(s) {dupes}; give each a distinct name")
    fields = record_fields(records)
    total = torch.zeros(n, dtype=torch.float32)
    per_fn: dict[str, torch.Tensor] = {}
    for reward in fns:
        raw = _call(reward, prompts, responses, fields, records) if n else []
        values = [None] * n if raw is SKIPPED else check_values(reward, raw, records)
        tensor = torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float32)
        per_fn[reward.name] = tensor
        total = total + float(reward.weight) * tensor
    overflow = torch.isinf(total).nonzero().flatten().tolist()
    if overflow:
        i = overflow[0]
        raise RewardError(
            f"the weighted sum of the rewards ({', '.join(f'{f.name} x {f.weight:g}' for f in fns)}) is not finite "
            f"in float32 for {_where(i, records)}; lower the weights or the values", i, records[i].get("source"))
    return total, per_fn


def skipped_groups(total: torch.Tensor, group_size: int) -> tuple[torch.Tensor, int]:
    """Which items to keep after a `reward_on_error: skip_group` failure.

    total: (B,) rewards, NaN where the server could not score an item; B = groups * group_size with a
    group's responses adjacent. Returns (keep (B,) bool: False for every item of a group holding a
    NaN, number of groups dropped) — log the count as `reward/skipped_groups`.
    """
    import torch

    if group_size < 1 or total.numel() % group_size:
        raise ValueError(f"skipped_groups: {total.numel()} rewards do not split into groups of {group_size}")
    bad = torch.isnan(total.reshape(-1, group_size)).any(dim=1)
    return ~bad.repeat_interleave(group_size), int(bad.sum())


# ---------------------------------------------------------------- rule reward


def _default_get_task(name: str):
    from ppokit import tasks

    return tasks.get(name)


def make_rule_reward(default_task: str | None = None, get_task: Callable | None = None) -> RewardFn:
    """The task verifier chosen by each record's `task` field, else `default_task`, else the task
    `detect_task` recognises from the record's prompt and label (as the reward server does; PaddleNLP's
    `use_rule_reward` rows carry no task), as a RewardFn. Each detected task is logged once."""
    from ppokit.rewards.detect import detect_task

    lookup = get_task or _default_get_task
    cache: dict[str, Any] = {}
    detected: set[str] = set()

    def rule_reward(prompts, responses, records=None, label=None, task=None, source=None, **extra):
        n = len(responses)
        scores = []
        for i in range(n):
            record = dict(records[i]) if records else {}
            record.setdefault("prompt", prompts[i])
            record.setdefault("label", label[i] if label else None)
            record.setdefault("source", source[i] if source else None)
            record.setdefault("fields", {k: v[i] for k, v in extra.items()})
            name = record.get("task") or (task[i] if task else None) or default_task
            where = f"record {i} (source {record['source']!r})"
            if not name:
                name = detect_task(str(record.get("prompt") or ""), _text(record.get("label")))
                if name not in detected:
                    detected.add(name)
                    _log.info("rule reward: records without a 'task' field whose prompt and label look like "
                              "%s are scored as %s (set `task` or a 'task' field to choose).", name, name)
            if name not in cache:
                try:
                    cache[name] = lookup(name)
                except Exception as exc:
                    raise RewardError(f"{where} names task {name!r}, which cannot be used: {exc}",
                                      i, record["source"]) from exc
            record["task"] = name
            scores.append(cache[name].score(responses[i], record))
        return scores

    return rule_reward


def _text(label: Any) -> str | None:
    """A label as text: the last turn of a list label, None when absent."""
    if isinstance(label, (list, tuple)):
        label = label[-1] if label else None
    return None if label is None else str(label)


# ---------------------------------------------------------------- custom file.py:fn


def load_reward_function(spec: str, base_dir: str | Path | None = None) -> NamedReward:
    """Load `path/to/file.py:function` (relative paths: the working directory, then `base_dir`)."""
    path_text, sep, fn_name = spec.strip().rpartition(":")
    if not sep or not path_text or not fn_name:
        raise RewardError(f"reward function {spec!r} should look like 'file.py:function_name'")
    path = Path(path_text).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path] + ([Path(base_dir) / path] if base_dir else [])
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        looked = ", ".join(str(c.resolve()) for c in candidates)
        raise RewardError(f"reward function file {path_text!r} does not exist (looked at {looked})")
    found = found.resolve()
    try:
        module = import_user_file(found, "ppokit_reward")
    except Exception as exc:
        raise RewardError(f"importing reward function file {str(found)!r} failed: "
                          f"{type(exc).__name__}: {exc}") from exc
    module_name = module.__name__
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        available = sorted(k for k, v in vars(module).items()
                           if callable(v) and not k.startswith("_") and getattr(v, "__module__", None) == module_name)
        what = "is not callable" if fn is not None else "is not defined"
        raise RewardError(f"{fn_name!r} {what} in {str(found)!r}; functions defined there: {available or 'none'}")
    from ppokit.rewards.verl_score import adapt

    return NamedReward(name=fn_name, fn=adapt(fn, fn_name))  # verl's compute_score(...) runs per item


def parse_reward_functions(specs: str | Sequence[str] | None, base_dir: str | Path | None = None) -> list[NamedReward]:
    """`"a.py:f,b.py:g"` (or a list of such strings) -> NamedRewards in order."""
    if not specs:
        return []
    items = specs.split(",") if isinstance(specs, str) else [s for part in specs for s in part.split(",")]
    return [load_reward_function(s, base_dir) for s in items if s.strip()]
