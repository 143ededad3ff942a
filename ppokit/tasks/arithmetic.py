"""Integer arithmetic (+, −, ×) with difficulty knobs, sized by default for a 135M instruct model.

Defaults: 2 operands of 1 digit (0–9), `+` and `-`, non-negative results, and the prompt
"What is 3 + 5? Answer with just the number." (`template`, with `{expression}`).
Answer extraction: the content of the last `\\boxed{…}` when present, else the last number in the
response ("1,234", "-7", "8.0" are numbers; a `-` right after a digit is an operator, not a sign).
Score: 1.0 when it equals the reference exactly, else 0.0.
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

from ppokit.tasks.expr import ExprError, parse
from ppokit.tasks.math_answer import last_boxed
from ppokit.tasks.task import Task, TaskError, int_range, require_reference

DEFAULT_TEMPLATE = "What is {expression}? Answer with just the number."
SYMBOLS = {"+": "+", "-": "-", "*": "×", "×": "×", "x": "×"}
_NUMBER = re.compile(r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def _operand_range(digits: int) -> tuple[int, int]:
    return (0, 9) if digits == 1 else (10 ** (digits - 1), 10**digits - 1)


def _parse_ops(ops) -> list[str]:
    items = list(ops.replace(",", "").replace(" ", "")) if isinstance(ops, str) else list(ops)
    if not items or any(o not in SYMBOLS for o in items):
        raise TaskError(f"arithmetic: ops must be made of '+', '-' and '*' (e.g. \"+-\"), got {ops!r}")
    return sorted({SYMBOLS[o] for o in items}, key="+-×".index)


def generate(n: int, seed: int, digits, operands, ops, nonnegative: bool, template: str) -> list[dict]:
    d_lo, d_hi = int_range("arithmetic", "digits", digits, 1, 9)
    k_lo, k_hi = int_range("arithmetic", "operands", operands, 2, 8)
    symbols = _parse_ops(ops)
    if "{expression}" not in template:
        raise TaskError("arithmetic: template must contain '{expression}'")
    rng = random.Random(f"arithmetic:{seed}")
    rows = []
    while len(rows) < n:
        count = rng.randint(k_lo, k_hi)
        values = [rng.randint(*_operand_range(rng.randint(d_lo, d_hi))) for _ in range(count)]
        signs = [rng.choice(symbols) for _ in range(count - 1)]
        expression = str(values[0]) + "".join(f" {s} {v}" for s, v in zip(signs, values[1:]))
        value, _ = parse(expression)
        if nonnegative and value < 0:
            continue
        rows.append(
            {
                "src": [template.format(expression=expression)],
                "tgt": [str(int(value))],
                "task": "arithmetic",
                "expression": expression,
            }
        )
    return rows


def _to_number(text: str) -> Fraction | None:
    try:
        return Fraction(text.replace(",", "").replace("−", "-"))
    except (ValueError, ZeroDivisionError):
        return None


def extract_answer(response: str) -> str | None:
    """The answer text: last \\boxed{} content (its last number), else the last number in the response."""
    boxed = last_boxed(response)
    if boxed is not None:
        numbers = _NUMBER.findall(boxed)
        return numbers[-1] if numbers else boxed.strip()
    numbers = _NUMBER.findall(response)
    return numbers[-1] if numbers else None


def score(response: str, record: dict) -> tuple[float, dict]:
    reference = require_reference("arithmetic", record).strip()
    expected = _to_number(reference)
    if expected is None:
        try:
            expected, _ = parse(reference)
        except ExprError as err:
            raise TaskError(
                f"arithmetic: {record.get('source', 'the record')}: reference {reference!r} is not a number"
            ) from err
    predicted = extract_answer(response)
    value = _to_number(predicted) if predicted is not None else None
    correct = value is not None and value == expected
    return (1.0 if correct else 0.0), {"expected": reference, "predicted": predicted, "correct": correct}


def solution(record: dict) -> str:
    return require_reference("arithmetic", record).strip()


TASK = Task(
    name="arithmetic",
    description="integer +, -, x problems; the answer is the last number (or \\boxed{}); score 1 / 0",
    defaults={"digits": 1, "operands": 2, "ops": "+-", "nonnegative": True, "template": DEFAULT_TEMPLATE},
    max_score=1.0,
    generate_fn=generate,
    score_fn=score,
    solution_fn=solution,
)
