"""gsm8k-style word problems: verl's ``openai/gsm8k`` data source and PaddleNLP's gsm8k rule reward.

Score (verl's default gsm8k scorer): 1.0 when the number after the response's last ``####`` equals
the reference, else 0.0 (see `ppokit.tasks.math_answer`). The generator writes small two-step word
problems whose reference is a gsm8k solution ending in ``#### N``, so a CPU run has data offline.
"""

from __future__ import annotations

import random

from ppokit.tasks.math_answer import gsm8k_answer, gsm8k_score
from ppokit.tasks.task import Task, TaskError, require_reference

INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."
_ITEMS = ("apples", "pencils", "stickers", "marbles", "cookies", "books")
_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima")


def generate(n: int, seed: int, max_value: int) -> list[dict]:
    if not isinstance(max_value, int) or max_value < 2:
        raise TaskError(f"gsm8k: max_value must be an integer >= 2, got {max_value!r}")
    rng = random.Random(f"gsm8k:{seed}")
    rows = []
    for _ in range(n):
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        have, bought = rng.randint(1, max_value), rng.randint(1, max_value)
        gave = rng.randint(0, have + bought)
        left = have + bought - gave
        question = (f"{name} has {have} {item}, buys {bought} more and gives {gave} away. "
                    f"How many {item} does {name} have now?")
        solution = f"{have} + {bought} = {have + bought}. {have + bought} - {gave} = {left}.\n#### {left}"
        rows.append({"src": [f"{question} {INSTRUCTION}"], "tgt": [solution], "task": "gsm8k"})
    return rows


def score(response: str, record: dict) -> tuple[float, dict]:
    reference = require_reference("gsm8k", record)
    value = gsm8k_score(response, reference)
    return value, {"expected": gsm8k_answer(reference) or reference.strip(),
                   "predicted": gsm8k_answer(response), "correct": value == 1.0}


def solution(record: dict) -> str:
    reference = require_reference("gsm8k", record)
    return reference if gsm8k_answer(reference) else f"#### {reference.strip()}"


TASK = Task(
    name="gsm8k",
    description="grade-school word problems; the answer follows the last '####'; score 1 / 0 (verl's scorer)",
    defaults={"max_value": 20},
    max_score=1.0,
    generate_fn=generate,
    score_fn=score,
    solution_fn=solution,
)
