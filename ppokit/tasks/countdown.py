"""Countdown: reach a target from 3–6 numbers with + − × ÷, each number used at most once.

The reference answer (`tgt`) is an equation that uses every number, e.g. "(7 + 5) * 3 - 2 = 34"; rows
also carry `numbers` and `target`. Scoring reads the available numbers and the target from the
record's fields (`numbers`, `target`), else from a JSON label {"numbers": [...], "target": n} (verl /
TinyZero rows), else from the reference equation itself.

Answer: the content of the last <answer>…</answer>, else the last non-empty line; an "= 34" tail is
ignored. It is evaluated with ppokit.tasks.expr (recursive descent, exact fractions, never `eval`).
Score: 1.0 when it is well formed, uses only available numbers (each at most once) and equals the
target; 0.1 (format credit) when it is a well-formed expression that misses (wrong value, or numbers
that are not available or used twice); 0.0 when there is no answer or it does not parse / divides by 0.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from fractions import Fraction

from ppokit.tasks.expr import ExprError, parse
from ppokit.tasks.task import Task, TaskError, fields_of, int_range, last_tag, reference_of

DEFAULT_TEMPLATE = (
    "Using the numbers {numbers}, make {target}. You may use +, -, *, / and each number at most once. "
    "Think inside <think> </think> tags, then write just the equation inside <answer> </answer> tags, "
    "for example <answer>(1 + 2) * 3</answer>."
)
FORMAT_CREDIT = 0.1
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def _combine(rng: random.Random, a: tuple, b: tuple) -> tuple | None:
    """Combine two (value, text, precedence) items with a random operator; None when not allowed."""
    op = rng.choice("+-*/")
    if op == "-" and a[0] < b[0]:
        a, b = b, a
    if op == "-" and a[0] == b[0]:
        return None
    if op == "/" and (b[0] in (0, 1) or a[0] == b[0] or a[0] % b[0] != 0):
        return None
    left = a[1] if a[2] >= _PREC[op] else f"({a[1]})"
    right = b[1] if b[2] > _PREC[op] or (b[2] == _PREC[op] and op in "+*") else f"({b[1]})"
    value = {"+": a[0] + b[0], "-": a[0] - b[0], "*": a[0] * b[0], "/": a[0] // b[0] if b[0] else 0}[op]
    return value, f"{left} {op} {right}", _PREC[op]


def _puzzle(rng: random.Random, count: int, max_number: int, max_target: int) -> tuple[list[int], str, int]:
    for _ in range(100_000):
        numbers = [rng.randint(1, max_number) for _ in range(count)]
        items = [(v, str(v), 3) for v in numbers]
        while len(items) > 1:
            i, j = rng.sample(range(len(items)), 2)
            merged = _combine(rng, items[i], items[j])
            if merged is None:
                continue
            items = [it for k, it in enumerate(items) if k not in (i, j)] + [merged]
        value, text, _ = items[0]
        if 1 <= value <= max_target:
            return numbers, text, value
    raise TaskError(
        f"countdown: could not reach a target in 1..{max_target} from {count} numbers up to {max_number}"
    )


def generate(n: int, seed: int, numbers, max_number: int, max_target: int, template: str) -> list[dict]:
    lo, hi = int_range("countdown", "numbers", numbers, 3, 6)
    if not (isinstance(max_number, int) and 2 <= max_number <= 10_000):
        raise TaskError(f"countdown: max_number must be an integer in 2..10000, got {max_number!r}")
    if not (isinstance(max_target, int) and max_target >= 1):
        raise TaskError(f"countdown: max_target must be a positive integer, got {max_target!r}")
    if "{numbers}" not in template or "{target}" not in template:
        raise TaskError("countdown: template must contain '{numbers}' and '{target}'")
    rng = random.Random(f"countdown:{seed}")
    rows = []
    for _ in range(n):
        nums, text, target = _puzzle(rng, rng.randint(lo, hi), max_number, max_target)
        rows.append(
            {
                "src": [template.format(numbers=str(nums), target=target)],
                "tgt": [f"{text} = {target}"],
                "task": "countdown",
                "numbers": nums,
                "target": target,
            }
        )
    return rows


def _problem(record: dict) -> tuple[list[int], int]:
    fields = fields_of(record)
    if isinstance(fields.get("numbers"), list) and fields.get("target") is not None:
        return [int(v) for v in fields["numbers"]], int(fields["target"])
    ref = reference_of(record)
    if ref is None:
        raise TaskError(
            f"countdown: {record.get('source', 'the record')} has neither numbers/target fields nor a reference"
        )
    ref = str(ref)
    try:
        data = json.loads(ref)
        if isinstance(data, dict) and "numbers" in data and "target" in data:
            return [int(v) for v in data["numbers"]], int(data["target"])
    except (ValueError, TypeError):
        pass
    lhs, _, rhs = ref.rpartition("=")
    try:
        _, used = parse(lhs)
        return used, int(rhs.strip())
    except (ExprError, ValueError) as err:
        raise TaskError(
            f"countdown: {record.get('source', 'the record')}: cannot read numbers and target from reference {ref!r}"
        ) from err


def extract_answer(response: str) -> str | None:
    text = last_tag(response, "answer")
    if text is None:
        lines = [line for line in response.strip().splitlines() if line.strip()]
        text = lines[-1] if lines else None
    if text is None or not text.strip():
        return None
    parts = [p.strip() for p in text.strip().rstrip(".").split("=")]
    with_ops = [p for p in parts if re.search(r"[-+*/×÷x]", p)]
    return (with_ops or parts)[0]


def score(response: str, record: dict) -> tuple[float, dict]:
    numbers, target = _problem(record)
    answer = extract_answer(response)
    info = {"numbers": numbers, "target": target, "answer": answer, "value": None, "correct": False}
    if answer is None:
        return 0.0, {**info, "verdict": "missing"}
    try:
        value, used = parse(answer)
    except ExprError as err:
        return 0.0, {**info, "verdict": f"unparsed: {err}"}
    info["value"] = str(value)
    if Counter(used) - Counter(numbers):
        return FORMAT_CREDIT, {**info, "verdict": "numbers not available or used twice"}
    if value != Fraction(target):
        return FORMAT_CREDIT, {**info, "verdict": "wrong value"}
    return 1.0, {**info, "verdict": "correct", "correct": True}


def solution(record: dict) -> str:
    ref = str(reference_of(record) or "")
    return f"<think>Try combinations.</think>\n<answer>{ref.rpartition('=')[0].strip() or ref}</answer>"


TASK = Task(
    name="countdown",
    description="reach a target from 3-6 numbers with + - * /; score 1, 0.1 for a well-formed miss, else 0",
    defaults={"numbers": "3-4", "max_number": 25, "max_target": 100, "template": DEFAULT_TEMPLATE},
    max_score=1.0,
    generate_fn=generate,
    score_fn=score,
    solution_fn=solution,
)
