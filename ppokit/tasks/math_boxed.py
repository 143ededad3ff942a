"""MATH-style problems answered in ``\\boxed{}``: verl's ``lighteval/MATH`` data sources.

Score (verl's default MATH scorer): 1.0 when the response's last ``\\boxed{}`` equals the reference
after `normalize_math_answer`, else 0.0 (see `ppokit.tasks.math_answer`). The generator writes
fraction problems (``\\frac{6}{8}`` -> ``\\frac{3}{4}``) so a CPU run has data offline.
"""

from __future__ import annotations

import random
from fractions import Fraction

from ppokit.tasks.math_answer import last_boxed, math_score
from ppokit.tasks.task import Task, TaskError, require_reference

INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def _latex(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def generate(n: int, seed: int, max_value: int) -> list[dict]:
    if not isinstance(max_value, int) or max_value < 2:
        raise TaskError(f"math: max_value must be an integer >= 2, got {max_value!r}")
    rng = random.Random(f"math:{seed}")
    rows = []
    for _ in range(n):
        a, b, c, d = (rng.randint(1, max_value) for _ in range(4))
        total = Fraction(a, b) + Fraction(c, d)
        problem = f"Compute $\\frac{{{a}}}{{{b}}} + \\frac{{{c}}}{{{d}}}$ in lowest terms."
        rows.append({"src": [f"{problem} {INSTRUCTION}"], "tgt": [f"\\boxed{{{_latex(total)}}}"], "task": "math"})
    return rows


def score(response: str, record: dict) -> tuple[float, dict]:
    reference = require_reference("math", record)
    value = math_score(response, reference)
    return value, {"expected": last_boxed(reference) or reference.strip(), "predicted": last_boxed(response),
                   "correct": value == 1.0}


def solution(record: dict) -> str:
    reference = require_reference("math", record)
    return reference if last_boxed(reference) is not None else f"\\boxed{{{reference.strip()}}}"


TASK = Task(
    name="math",
    description="competition math answered in \\boxed{}; compared after MATH normalisation; score 1 / 0 (verl's scorer)",
    defaults={"max_value": 9},
    max_score=1.0,
    generate_fn=generate,
    score_fn=score,
    solution_fn=solution,
)
