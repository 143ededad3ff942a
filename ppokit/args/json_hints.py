"""Why a JSON text does not parse, when the reason is one people hit from JSON5/JSONC habits: a comment or a
trailing comma. `json` itself only says "Expecting property name enclosed in double quotes"."""

from __future__ import annotations


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based (line, column) of `index` in `text`."""
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def json_habit(text: str) -> tuple[int, int, str] | None:
    """(line, column, sentence) of the first comment (// ..., /* ... */, # ...) or trailing comma (a ',' right
    before '}' or ']') outside strings, or None when there is none."""
    in_str = esc = False
    last_comma = None  # index of a ',' followed so far only by whitespace
    for i, ch in enumerate(text):
        if in_str:
            esc, in_str = (not esc and ch == "\\"), in_str and not (ch == '"' and not esc)
            continue
        if ch == '"':
            in_str, last_comma = True, None
        elif text.startswith("//", i) or text.startswith("/*", i) or ch == "#":
            line, col = _position(text, i)
            return line, col, "comments are not JSON (remove it, or write the file as YAML, where # starts a comment)"
        elif ch in "}]" and last_comma is not None:
            line, col = _position(text, last_comma)
            return line, col, f"a trailing comma before '{ch}' is not JSON (remove the comma)"
        elif ch == ",":
            last_comma = i
        elif not ch.isspace():
            last_comma = None
    return None
