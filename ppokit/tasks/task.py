"""The `Task` record shared by the built-in tasks: a generator and a verifier, registered by name."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ppokit.errors import PpokitError


class TaskError(PpokitError, ValueError):
    """A user mistake about a task: unknown name, bad difficulty option, record without a reference."""


@dataclass(frozen=True)
class Task:
    """A built-in task.

    `generate(n, seed, **difficulty)` returns `n` rows in src/tgt form
    (`{"src": [question], "tgt": [reference], "task": name, ...extra}`); the same arguments always give
    the same rows. `score(response, record, details=False)` returns the reward of `response` against
    `record` (a ppokit Record, whose `label` is the reference, or a raw src/tgt row); with
    `details=True` it returns `(score, dict)` saying how the score was reached.
    `solution(record)` is a response that earns the maximum score (for tests and warm-up data).
    `defaults` lists the difficulty options and their default values.
    """

    name: str
    description: str
    defaults: dict[str, Any]
    max_score: float
    generate_fn: Callable[..., list[dict]] = field(repr=False)
    score_fn: Callable[[str, dict], tuple[float, dict]] = field(repr=False)
    solution_fn: Callable[[dict], str] = field(repr=False)

    def generate(self, n: int, seed: int = 0, **difficulty: Any) -> list[dict]:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise TaskError(f"{self.name}: n must be a non-negative integer, got {n!r}")
        options = self.options(**difficulty)
        return self.generate_fn(n, int(seed), **options)

    def options(self, **difficulty: Any) -> dict[str, Any]:
        """The defaults with `difficulty` applied; unknown options are an error naming the known ones."""
        for key in difficulty:
            if key not in self.defaults:
                close = difflib.get_close_matches(key, list(self.defaults), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                known = ", ".join(sorted(self.defaults))
                raise TaskError(
                    f"{self.name}: unknown difficulty option {key!r}{hint}; known options: {known}"
                )
        return {**self.defaults, **difficulty}

    def score(self, response: str, record: dict, details: bool = False) -> float | tuple[float, dict]:
        if not isinstance(response, str):
            raise TaskError(f"{self.name}: the response must be a string, got {type(response).__name__}")
        value, info = self.score_fn(response, record)
        return (value, info) if details else value

    def solution(self, record: dict) -> str:
        return self.solution_fn(record)


def reference_of(record: dict) -> Any:
    """The reference answer of a ppokit Record (`label`) or of a raw row (last `tgt` turn, verl ground truth)."""
    is_record = "source" in record or "fields" in record
    if record.get("label") is not None or (is_record and "label" in record):
        return record.get("label")
    tgt = record.get("tgt")
    if isinstance(tgt, list) and tgt:
        return tgt[-1]
    if isinstance(tgt, str):
        return tgt
    reward_model = record.get("reward_model")
    ground = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
    if ground is not None:
        return ground if isinstance(ground, str) else json.dumps(ground)
    return None


def fields_of(record: dict) -> dict:
    """Extra fields: a Record's `fields`, or the raw row itself."""
    fields = record.get("fields")
    return fields if isinstance(fields, dict) else record


def prompt_of(record: dict) -> str:
    """The prompt text of a Record or raw row (templated prompt, last user message or last src turn)."""
    if isinstance(record.get("prompt"), str):
        return record["prompt"]
    for key in ("messages", "prompt"):
        turns = record.get(key)
        if isinstance(turns, list) and turns and isinstance(turns[-1], dict):
            return str(turns[-1].get("content", ""))
    src = record.get("src")
    if isinstance(src, list) and src:
        return str(src[-1])
    return src if isinstance(src, str) else ""


def require_reference(task: str, record: dict) -> str:
    ref = reference_of(record)
    if ref is None or (isinstance(ref, str) and not ref.strip()):
        where = record.get("source", "the record")
        raise TaskError(f"{task}: {where} has no reference answer (label / last 'tgt' turn); cannot score it")
    return str(ref)


def int_range(task: str, key: str, value: Any, lo: int, hi: int) -> tuple[int, int]:
    """Parse a count option given as an int, "a-b" or [a, b]; check it lies in [lo, hi]."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, int):
        pair = (value, value)
    elif isinstance(value, str) and value.strip().replace("-", "", 1).isdigit():
        parts = value.strip().split("-")
        pair = (int(parts[0]), int(parts[-1]))
    elif isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        pair = (value[0], value[1])
    else:
        raise TaskError(f"{task}: {key} must be an integer, 'a-b' or [a, b], got {value!r}")
    if not (lo <= pair[0] <= pair[1] <= hi):
        raise TaskError(f"{task}: {key} must lie within {lo}..{hi} (low <= high), got {value!r}")
    return pair


def last_tag(text: str, tag: str) -> str | None:
    """Content of the last <tag>…</tag> in `text`, or None."""
    close = text.rfind(f"</{tag}>")
    if close < 0:
        return None
    start = text.rfind(f"<{tag}>", 0, close)
    if start < 0:
        return None
    return text[start + len(tag) + 2 : close]
