"""Knights and Knaves puzzles (the ppo-kk data) and the ppo-kk reward server's scorer.

A puzzle has N people (2–8), each a knight (always tells the truth) or a knave (always lies), and one
statement per person built from "X is a knight/knave", "it is not the case that …", "and", "or",
"if … then …" and "… if and only if …". Only puzzles with exactly one consistent assignment are kept
(brute force over all 2^N assignments, done with bitsets).

Scoring (as PaddleNLP's / Logic-RL's knights-and-knaves reward server):
- format: +1 when the response holds exactly one `<think>`, one `</think>`, one `<answer>` and one
  `</answer>`, in that order (text around them is allowed); otherwise −1. As PaddleNLP's compute_score,
  the response is read as if the assistant turn began with `<think>` (its prompts prefill it): unless
  the response holds "<|im_start|>assistant\n<think>" itself, `<think>` is prepended before parsing, so
  a response must not open its own `<think>` (that makes two and fails the format).
- answer (only read when the format is right): +2 when every role is right, −1.5 when the answer names
  every person's role but some are wrong, −2 when it cannot be parsed (a person missing, or a number of
  "knight"/"knave" words that differs from the number of people) or the format is wrong.
So the total is 3, −0.5, −1 or −3.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from ppokit.tasks.task import Task, TaskError, int_range, last_tag, require_reference

NAMES = (
    "Zoey Oliver Ethan Mia Liam Emma Noah Ava Lucas Sofia Mason Chloe Logan Grace Jacob Lily Owen Harper "
    "Henry Ella Jack Aria Leo Nora Isaac Ruby Caleb Hazel Dylan Violet Aiden Stella Samuel Aurora David "
    "Penelope Joseph Scarlett Wyatt Luna Gabriel Layla Daniel Riley Elijah Zara Victoria Sebastian"
).split()
OPS = ("not", "and", "or", "if", "iff")
DEFAULT_TEMPLATE = (
    "{puzzle}\n\nYour answer starts inside an open <think> tag: think it through, close it with </think>, "
    "then state the identity of each person "
    "inside <answer> </answer> tags, one per line, for example:\n"
    "<answer>(1) Alice is a knight\n(2) Bob is a knave</answer>"
)
INTRO = (
    "A very special island is inhabited only by knights and knaves. Knights always tell the truth, "
    "and knaves always lie. You meet {count} inhabitants: {names}."
)
VERBS = ("says", "claims", "states", "remarks")
FORMAT_OK, FORMAT_BAD = 1.0, -1.0
ANSWER_RIGHT, ANSWER_WRONG, ANSWER_UNPARSED = 2.0, -1.5, -2.0


@lru_cache(maxsize=16)
def _knight_tables(n: int) -> tuple[int, ...]:
    """For each person p: the bitset over assignments m (bit p of m = p is a knight) where p is a knight."""
    return tuple(sum(1 << m for m in range(1 << n) if m >> p & 1) for p in range(n))


def _table(stmt: tuple, n: int) -> int:
    full = (1 << (1 << n)) - 1
    kind = stmt[0]
    if kind == "is":
        knight = _knight_tables(n)[stmt[1]]
        return knight if stmt[2] else full ^ knight
    if kind == "not":
        return full ^ _table(stmt[1], n)
    a, b = _table(stmt[1], n), _table(stmt[2], n)
    return {"and": a & b, "or": a | b, "if": (full ^ a) | b, "iff": full ^ (a ^ b)}[kind]


def solutions(statements: list[tuple], n: int) -> int:
    """Bitset of the assignments consistent with every statement (speaker i's statement true iff i is a knight)."""
    full = (1 << (1 << n)) - 1
    consistent = full
    for i, stmt in enumerate(statements):
        consistent &= full ^ (_table(stmt, n) ^ _knight_tables(n)[i])
    return consistent


def _random_statement(rng: random.Random, speaker: int, n: int, ops: tuple[str, ...]) -> tuple:
    others = [p for p in range(n) if p != speaker]
    kind = rng.choice(("is",) + ops)
    if kind == "is":
        return ("is", rng.choice(others), rng.random() < 0.5)
    if kind == "not":
        return ("not", ("is", rng.choice(others), rng.random() < 0.5))
    a, b = rng.sample(range(n), 2)  # two different people; the speaker may be one of them
    return (kind, ("is", a, rng.random() < 0.5), ("is", b, rng.random() < 0.5))


def _puzzle(rng: random.Random, n: int, ops: tuple[str, ...]) -> tuple[list[str], int, list[tuple]]:
    names = rng.sample(NAMES, n)
    for _ in range(10_000):
        truth = rng.randrange(1 << n)
        statements = []
        for speaker in range(n):
            want = truth >> speaker & 1
            stmt = _random_statement(rng, speaker, n, ops)
            while (_table(stmt, n) >> truth & 1) != want:
                stmt = _random_statement(rng, speaker, n, ops)
            statements.append(stmt)
        if solutions(statements, n) == 1 << truth:
            return names, truth, statements
    raise TaskError(
        f"knights_knaves: could not build a puzzle with exactly one solution for {n} people and ops {ops}"
    )


def _say(stmt: tuple, names: list[str]) -> str:
    kind = stmt[0]
    if kind == "is":
        return f"{names[stmt[1]]} is a {'knight' if stmt[2] else 'knave'}"
    if kind == "not":
        return f"it is not the case that {_say(stmt[1], names)}"
    a, b = _say(stmt[1], names), _say(stmt[2], names)
    return {
        "and": f"{a} and {b}",
        "or": f"{a} or {b}",
        "if": f"if {a} then {b}",
        "iff": f"{a} if and only if {b}",
    }[kind]


def _join_names(names: list[str]) -> str:
    return (
        names[0]
        if len(names) == 1
        else ", ".join(names[:-1]) + (", and " if len(names) > 2 else " and ") + names[-1]
    )


def answer_text(names: list[str], truth: int) -> str:
    return "\n".join(
        f"({i + 1}) {name} is a {'knight' if truth >> i & 1 else 'knave'}" for i, name in enumerate(names)
    )


def _parse_ops(ops) -> tuple[str, ...]:
    items = [o.strip() for o in ops.split(",")] if isinstance(ops, str) else list(ops)
    bad = [o for o in items if o not in OPS]
    if bad or not items:
        raise TaskError(f"knights_knaves: ops must be a non-empty subset of {', '.join(OPS)}; got {ops!r}")
    return tuple(items)


def generate(n: int, seed: int, people, ops, template: str) -> list[dict]:
    lo, hi = int_range("knights_knaves", "people", people, 2, 8)
    op_list = _parse_ops(ops)
    if "{puzzle}" not in template:
        raise TaskError("knights_knaves: template must contain '{puzzle}'")
    rng = random.Random(f"knights_knaves:{seed}")
    rows = []
    for i in range(n):
        count = lo + i % (hi - lo + 1)
        names, truth, statements = _puzzle(rng, count, op_list)
        lines = [INTRO.format(count=count, names=_join_names(names))]
        for speaker, stmt in enumerate(statements):
            said = _say(stmt, names)
            lines.append(f'{names[speaker]} {rng.choice(VERBS)}, "{said[0].upper() + said[1:]}."')
        lines.append("So who is a knight and who is a knave?")
        rows.append(
            {
                "src": [template.format(puzzle=" ".join(lines))],
                "tgt": [answer_text(names, truth)],
                "task": "knights_knaves",
                "people": count,
            }
        )
    return rows


_GT_LINE = re.compile(r"\b([A-Za-z]+)\b.*?\b(knight|knave)\b", re.IGNORECASE)


def parse_reference(text: str) -> dict[str, str]:
    """'(1) Zoey is a knight\\n(2) …' -> {"Zoey": "knight", …} (one person per line)."""
    roles = {}
    for line in text.splitlines():
        match = _GT_LINE.search(line)
        if match:
            roles[match.group(1)] = match.group(2).lower()
    return roles


def parse_answer(text: str, names: list[str]) -> dict[str, str] | None:
    """Roles named in an <answer> body, or None when it cannot be read (as the ppo-kk server does)."""
    lowered = text.lower()
    if lowered.count("knight") + lowered.count("knave") != len(names):
        return None
    roles = {}
    for name in names:
        match = re.search(rf"\b{re.escape(name)}\b\s+is\s+a\s+\b(knight|knave)\b", text, re.IGNORECASE)
        if not match:
            return None
        roles[name] = match.group(1).lower()
    return roles


def format_ok(response: str) -> bool:
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    if any(response.count(tag) != 1 for tag in tags):
        return False
    positions = [response.find(tag) for tag in tags]
    return positions == sorted(positions)


ASSISTANT_THINK = "<|im_start|>assistant\n<think>"


def as_paddle_reads(response: str) -> str:
    """The text PaddleNLP's compute_score parses: what follows the first "<|im_start|>assistant" when the
    response holds "<|im_start|>assistant\n<think>", else "\n<think>" + the response."""
    if ASSISTANT_THINK in response:
        return response.split("<|im_start|>assistant", 1)[1]
    return "\n<think>" + response


def score(response: str, record: dict) -> tuple[float, dict]:
    expected = parse_reference(require_reference("knights_knaves", record))
    if not expected:
        raise TaskError(
            f"knights_knaves: {record.get('source', 'the record')}: the reference answer lists no roles"
        )
    response = as_paddle_reads(response)
    fmt = format_ok(response)
    predicted = parse_answer(last_tag(response, "answer") or "", list(expected)) if fmt else None
    if predicted is None:
        answer, verdict = ANSWER_UNPARSED, "format" if not fmt else "unparsed"
    elif predicted == expected:
        answer, verdict = ANSWER_RIGHT, "correct"
    else:
        answer, verdict = ANSWER_WRONG, "wrong"
    fmt_score = FORMAT_OK if fmt else FORMAT_BAD
    info = {
        "format_ok": fmt,
        "format_score": fmt_score,
        "answer_score": answer,
        "verdict": verdict,
        "expected": expected,
        "predicted": predicted,
        "correct": verdict == "correct",
    }
    return fmt_score + answer, info


def solution(record: dict) -> str:
    return f"I check each statement.</think>\n<answer>{require_reference('knights_knaves', record)}</answer>"


TASK = Task(
    name="knights_knaves",
    description="Knights and Knaves logic puzzles (ppo-kk); score 3 / -0.5 / -1 / -3 as the ppo-kk reward server",
    defaults={"people": 3, "ops": ",".join(OPS), "template": DEFAULT_TEMPLATE},
    max_score=FORMAT_OK + ANSWER_RIGHT,
    generate_fn=generate,
    score_fn=score,
    solution_fn=solution,
)
