"""JSON-lines files that survive interruption: one flushed row per line, tolerant reading, truncation.

Every row is written with ``allow_nan=False`` after non-finite floats become ``null``, so the files
are strict JSON that any tool (pandas, jq, a browser) reads.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def to_number(value: Any) -> float | int | None:
    """A plain Python number for an int/float/bool/0-d tensor/numpy scalar; None when not finite.

    Raises TypeError for values that are not numbers (strings, lists, tensors of many elements).
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) or not hasattr(value, "__float__"):
        raise TypeError(f"{value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError) as exc:  # e.g. a tensor with many elements
        raise TypeError(f"{value!r} is not a single number") from exc
    return number if math.isfinite(number) else None


def to_jsonable(value: Any) -> Any:
    """Convert a value (nested dicts/lists, tensors, numpy scalars, paths, enums) to strict-JSON data."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (int, float)):  # tensors and numpy arrays
        return to_jsonable(value.tolist())
    if isinstance(value, (bool, int)):
        return value
    try:
        return to_number(value)
    except TypeError:
        pass
    enum_value = getattr(value, "value", None)
    if isinstance(enum_value, (str, int, float)):
        return to_jsonable(enum_value)
    return str(value)


def dumps(row: dict) -> str:
    """One strict-JSON line for a row (non-finite numbers become null)."""
    return json.dumps(to_jsonable(row), ensure_ascii=False, allow_nan=False)


class JsonlWriter:
    """Append rows to a .jsonl file, flushing after each one so an interrupted run stays readable."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, row: dict) -> None:
        self._file.write(dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


@dataclass
class JsonlContents:
    """Rows read from a .jsonl file, with the lines that could not be read (1-based numbers)."""

    rows: list[dict] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)
    truncated_last_line: bool = False

    def problems(self, name: str) -> list[str]:
        """Sentences describing what was skipped, for reports and notes."""
        notes = []
        middle = [n for n in self.bad_lines if not (self.truncated_last_line and n == self.bad_lines[-1])]
        if self.truncated_last_line:
            notes.append(
                f"The last line of {name} (line {self.bad_lines[-1]}) is incomplete, probably because the "
                "run was interrupted while writing it; it was skipped."
            )
        if middle:
            shown = ", ".join(str(n) for n in middle[:10]) + (" ..." if len(middle) > 10 else "")
            notes.append(
                f"{len(middle)} line(s) of {name} are not valid JSON rows and were skipped: {shown}."
            )
        return notes


def read_jsonl(path: str | os.PathLike) -> JsonlContents:
    """Read every JSON-object line of a file, skipping (and recording) lines that do not parse."""
    contents = JsonlContents()
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict):
            contents.rows.append(row)
            continue
        contents.bad_lines.append(number)
        if number == len(lines) and not ends_with_newline:
            contents.truncated_last_line = True
    return contents


def truncate_jsonl(path: str | os.PathLike, max_step: int) -> tuple[list[dict], int]:
    """Rewrite a .jsonl file keeping only readable rows with ``step <= max_step``.

    Returns the rows kept and the number of lines dropped (rows after ``max_step`` and unreadable
    lines). The file is replaced atomically; a missing file is left missing.
    """
    path = Path(path)
    if not path.exists():
        return [], 0
    contents = read_jsonl(path)
    kept = [r for r in contents.rows if isinstance(r.get("step"), (int, float)) and r["step"] <= max_step]
    dropped = len(contents.rows) - len(kept) + len(contents.bad_lines)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in kept:
            f.write(dumps(row) + "\n")
    os.replace(tmp, path)
    return kept, dropped
