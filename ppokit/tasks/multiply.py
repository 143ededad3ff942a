"""Multiplying two 3-digit numbers with a `multiply` tool: a task that needs a tool call (issue 27).

A 135M model cannot multiply 3-digit numbers in its head, but it can copy the operands into a tool call and the
tool's result into its answer. The bundled SmolLM2 calls a tool only after worked examples (DESIGN.md section 6),
so every prompt carries two: src/tgt turns in which the assistant writes a hermes call
``<tool_call>{"name": "multiply", "arguments": {"a": 211, "b": 437}}</tool_call>``, a user turn brings back
``<tool_response>\\n92207\\n</tool_response>`` (how `ppokit.rollout.agent_loop` renders a tool turn for a chat
template without a tool role), and the assistant answers. Then the question.
Score: 1.0 when a number of the final answer (the last model turn) is the product ("804 times 226 is 181704." and
"181704 is 804 times 226." both count), else 0.0.
"""

from __future__ import annotations

import json
import random

from ppokit.tasks.arithmetic import _NUMBER
from ppokit.tasks.task import Task, TaskError, int_range, require_reference

INTRO = ("You can use a tool: multiply(a, b) returns a times b. To call it, write "
         '<tool_call>{"name": "multiply", "arguments": {"a": A, "b": B}}</tool_call> and wait for the result.\n\n')
QUESTION = "What is {a} times {b}?"
EXAMPLES = ((211, 437), (598, 306))


def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b


def call_text(a: int, b: int) -> str:
    return "<tool_call>" + json.dumps({"name": "multiply", "arguments": {"a": a, "b": b}}) + "</tool_call>"


def result_text(value: int) -> str:
    return f"<tool_response>\n{value}\n</tool_response>"


def answer_text(a: int, b: int) -> str:
    return f"{a} times {b} is {a * b}."


def few_shot(a: int, b: int) -> tuple[list[str], list[str]]:
    """(src, tgt) of a prompt: two worked examples, then the question; tgt's last turn is the reference."""
    src, tgt = [], []
    for k, (x, y) in enumerate(EXAMPLES):
        src += [(INTRO if k == 0 else "") + QUESTION.format(a=x, b=y), result_text(x * y)]
        tgt += [call_text(x, y), answer_text(x, y)]
    return src + [QUESTION.format(a=a, b=b)], tgt + [str(a * b)]


def generate(n: int, seed: int, digits) -> list[dict]:
    lo, hi = int_range("multiply", "digits", digits, 2, 6)
    rng = random.Random(f"multiply:{seed}")
    rows = []
    for _ in range(n):
        a, b = (rng.randint(10 ** (rng.randint(lo, hi) - 1), 10 ** hi - 1) for _ in range(2))
        src, tgt = few_shot(a, b)
        rows.append({"src": src, "tgt": tgt, "task": "multiply", "a": a, "b": b})
    return rows


def score(response: str, record: dict) -> tuple[float, dict]:
    reference = require_reference("multiply", record).strip()
    if not reference.lstrip("-").isdigit():
        raise TaskError(f"multiply: {record.get('source', 'the record')}: reference {reference!r} is not an integer")
    numbers = [n.replace(",", "") for n in _NUMBER.findall(response)]
    correct = reference in numbers
    predicted = reference if correct else (numbers[-1] if numbers else None)
    return (1.0 if correct else 0.0), {"expected": reference, "predicted": predicted, "correct": correct}


def solution(record: dict) -> str:
    return require_reference("multiply", record).strip()


TASK = Task(
    name="multiply",
    description="a x b with 3-digit numbers and a multiply tool (multi-turn); the answer is the last number; 1 / 0",
    defaults={"digits": 3},
    max_score=1.0,
    generate_fn=generate,
    score_fn=score,
    solution_fn=solution,
)
