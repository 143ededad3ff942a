"""A small arithmetic-expression parser (recursive descent) with exact rational arithmetic.

Grammar (no unary minus, no exponent; `×`/`x` and `÷` are accepted for `*` and `/`):

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/") factor)*
    factor := INTEGER | "(" expr ")"

Never uses `eval`. `parse(text)` returns (value: Fraction, numbers: list[int]) where `numbers` are the
integer literals in the order written; a syntax error or a division by zero raises ExprError.
"""

from __future__ import annotations

import re
from fractions import Fraction

_TOKEN = re.compile(r"\s*(?:(\d+)|(.))")
_ALIASES = {"×": "*", "x": "*", "X": "*", "·": "*", "÷": "/", "−": "-", "–": "-", "[": "(", "]": ")"}
MAX_LEN = 200  # longer answers are not expressions a task asked for


class ExprError(ValueError):
    """The text is not a well-formed expression (or divides by zero)."""


def tokenize(text: str) -> list[str]:
    if len(text) > MAX_LEN:
        raise ExprError(f"expression longer than {MAX_LEN} characters")
    tokens = []
    for match in _TOKEN.finditer(text.strip()):
        number, other = match.groups()
        if number is not None:
            tokens.append(number)
            continue
        op = _ALIASES.get(other, other)
        if op not in "+-*/()":
            raise ExprError(f"unexpected character {other!r}")
        tokens.append(op)
    if not tokens:
        raise ExprError("empty expression")
    return tokens


class _Parser:
    # a tiny cursor over the token list (a plain class, no inheritance)
    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.pos = 0
        self.numbers: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ExprError("expression ends too early")
        self.pos += 1
        return tok

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.factor()
            if op == "/" and rhs == 0:
                raise ExprError("division by zero")
            value = value * rhs if op == "*" else value / rhs
        return value

    def factor(self) -> Fraction:
        tok = self.take()
        if tok == "(":
            value = self.expr()
            if self.take() != ")":
                raise ExprError("missing ')'")
            return value
        if tok.isdigit():
            self.numbers.append(int(tok))
            return Fraction(int(tok))
        raise ExprError(f"unexpected {tok!r}")


def parse(text: str) -> tuple[Fraction, list[int]]:
    """Evaluate `text` exactly; returns (value, integer literals in order)."""
    parser = _Parser(tokenize(text))
    value = parser.expr()
    if parser.peek() is not None:
        raise ExprError(f"unexpected {parser.peek()!r} after the expression")
    return value, parser.numbers
