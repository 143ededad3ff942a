"""Final-answer extraction and comparison for math word problems (gsm8k, MATH), written once.

Used by the verl data-source scorers (`gsm8k`, `math` tasks) and by PaddleNLP's gsm8k rule reward.
Behaviour follows verl's default scorers, slightly more forgiving about formatting:

* gsm8k: the answer is the number after the LAST ``####`` (verl's strict mode); commas, ``$`` and a
  trailing period are dropped, so ``#### $1,234.`` reads 1234. Score 1.0 when it equals the reference
  (numerically when both are numbers), else 0.0; no ``####`` scores 0.0, as in verl.
* MATH: the answer is the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``);
  both sides go through `normalize_math_answer` (the Hendrycks MATH normalisation verl uses: units,
  ``\\left``/``\\right``, ``dfrac``, ``0.5`` -> ``\\frac{1}{2}``, ``a/b`` -> ``\\frac{a}{b}``, spaces ...)
  and must then be equal strings. A reference holding a whole solution is reduced to its last box.
"""

from __future__ import annotations

import re
from fractions import Fraction

_GSM8K = re.compile(r"####\s*\$?\s*(-?[0-9][0-9.,]*|-?\.[0-9]+)")
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")


def _clean_number(text: str) -> str:
    return text.replace(",", "").rstrip(".")


def gsm8k_answer(text: str) -> str | None:
    """The number after the last ``####`` in ``text`` (commas, ``$``, trailing period dropped), or None."""
    found = _GSM8K.findall(text or "")
    if not found:
        return None
    answer = _clean_number(found[-1])
    return answer if any(c.isdigit() for c in answer) else None


def last_number(text: str) -> str | None:
    """The last number in ``text`` ("1,234" -> "1234", "-7", "3.5"), or None when there is none."""
    found = _NUMBER.findall(text or "")
    return _clean_number(found[-1]) if found else None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` (braces balanced), or of ``\\boxed x``
    (up to a space or ``$``); None when there is no box or its braces never close."""
    text = text or ""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start + (6 if text.startswith("\\boxed", start) else 5):]
    if rest.startswith(" "):
        return rest[1:].split("$")[0].split()[0] if rest[1:].strip() else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for i, char in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return rest[1:i]
    return None


def _as_fraction(text: str) -> Fraction | None:
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def gsm8k_score(response: str, ground_truth: str) -> float:
    """1.0 when the number after the response's last ``####`` equals ``ground_truth`` (a number, or a
    gsm8k solution ending in ``#### N``), else 0.0."""
    predicted = gsm8k_answer(response)
    if predicted is None:
        return 0.0
    truth = str(ground_truth).strip()
    expected = gsm8k_answer(truth) or _clean_number(truth)
    if predicted == expected:
        return 1.0
    a, b = _as_fraction(predicted), _as_fraction(expected)
    return 1.0 if a is not None and a == b else 0.0


def math_score(response: str, ground_truth: str) -> float:
    """1.0 when the response's last ``\\boxed{}`` equals ``ground_truth`` (an answer, or a solution whose
    last box is the answer) after `normalize_math_answer`, else 0.0."""
    predicted = last_boxed(response)
    if predicted is None:
        return 0.0
    truth = str(ground_truth)
    expected = last_boxed(truth) if "\\boxed" in truth or "\\fbox" in truth else truth
    if expected is None:
        return 0.0
    return 1.0 if normalize_math_answer(predicted) == normalize_math_answer(expected) else 0.0


def normalize_math_answer(text: str) -> str:
    """Canonical form of a MATH answer (Hendrycks' normalisation): drops line breaks, ``\\!``, ``\\left``/
    ``\\right``, degrees, dollars, percent signs, a trailing unit in ``\\text{}``, spaces and a short
    ``x =`` prefix; rewrites ``tfrac``/``dfrac``, ``\\frac12``, ``a/b``, ``\\sqrt2`` and ``0.5``."""
    s = str(text).replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac").replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "").replace("$", "")
    s = _drop_unit(s).replace("\\%", "").replace("%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if s.startswith("."):
        s = "0" + s
    lhs, eq, rhs = s.partition("=")
    if eq and "=" not in rhs and len(lhs.strip()) <= 2:
        s = rhs
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s).replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_slash(s)


def _drop_unit(s: str) -> str:
    """Remove a trailing ``\\text{ unit}`` (a space right after the brace marks a unit)."""
    head, sep, _ = s.partition("\\text{ ")
    return head if sep else s


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{7}`` -> ``\\frac{1}{7}``; braced fractions stay."""
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{") or len(part) < 2:
            out += part
        elif part[1] == "{":
            out += "{" + part[0] + "}" + part[1:]
        else:
            out += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
    return out


def _fix_slash(s: str) -> str:
    """``3/4`` (two integers) -> ``\\frac{3}{4}``."""
    match = re.fullmatch(r"(-?\d+)/(\d+)", s)
    return f"\\frac{{{match.group(1)}}}{{{match.group(2)}}}" if match else s
