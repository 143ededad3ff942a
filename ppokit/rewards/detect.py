"""Which built-in task a request item belongs to, when the request does not say.

PaddleNLP's request carries only `src` (the prompt, possibly chat-templated), `tgt` (the reference)
and `response`, so the server recognises the task from the prompt and label:

1. knights_knaves — the prompt mentions both "knight" and "knave" (any case), or the label reads like
   "(1) Zoey is a knight" (a numbered "... is a knight/knave" statement);
2. gsm8k — the label holds a gsm8k answer line "#### 72" (PaddleNLP's client sample and gsm8k data);
3. countdown — the prompt mentions "countdown", or the word "numbers" followed by a bracketed list of
   two or more integers ("Using the numbers [17, 18, 18], make 53"), or the label is an equation with
   an operator ending in "= <number>" ("18 + 17 + 18 = 53");
4. arithmetic — everything else (a plain-number label: "8").

Native `/v1/score` items may name their `task` and then skip this guess.
"""

from __future__ import annotations

import re

_KK_LABEL = re.compile(r"\(\s*\d+\s*\)\s*[^()]*?\bis an? (knight|knave)\b", re.IGNORECASE)
_WORDS = {
    "knight": re.compile(r"\bknights?\b", re.IGNORECASE),
    "knave": re.compile(r"\bknaves?\b", re.IGNORECASE),
    "countdown": re.compile(r"\bcountdown\b", re.IGNORECASE),
    "numbers": re.compile(r"\bnumbers\b[^\[\]\n]{0,40}\[\s*-?\d+(\s*,\s*-?\d+)+\s*\]", re.IGNORECASE),
}
_NUMBER = re.compile(r"\s*-?\d+(\.\d+)?\s*")
_OPERATION = re.compile(r"\d\s*\)*\s*[-+*/×÷]\s*\(*\s*\d")


def _is_equation(label: str | None) -> bool:
    """'18 + 17 + 18 = 53': an operation between numbers on the left of the last '=', a number on the right."""
    lhs, eq, rhs = (label or "").rpartition("=")
    return bool(eq and _NUMBER.fullmatch(rhs) and _OPERATION.search(lhs))

TASKS = ("knights_knaves", "gsm8k", "countdown", "arithmetic")
_GSM8K_LABEL = re.compile(r"####\s*\$?\s*-?[\d,]*\.?\d")


def detect_task(prompt: str, label: str | None = None) -> str:
    """The task name for an item, by the rules in the module docstring."""
    prompt = prompt or ""
    if (_WORDS["knight"].search(prompt) and _WORDS["knave"].search(prompt)) or (label and _KK_LABEL.search(label)):
        return "knights_knaves"
    if label and _GSM8K_LABEL.search(label):
        return "gsm8k"
    if _WORDS["countdown"].search(prompt) or _WORDS["numbers"].search(prompt) or _is_equation(label):
        return "countdown"
    return "arithmetic"
