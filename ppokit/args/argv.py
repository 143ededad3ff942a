"""Command-line override parsing: ``--key value``, ``--key=value``, bare ``--flag``, ``--no_<flag>``,
lists as JSON, comma/space-separated or several values. No prefix abbreviations (unlike argparse)."""

from __future__ import annotations

import json
import re
from typing import Any

from .arguments import Arguments
from .fieldinfo import allows_none, is_list, non_none
from .translate import RENAMES, unknown_key_message

SPECIAL_FLAGS = ("print_config", "help")
"""Options that are not arguments: handled by ``parse_cli``."""

NONE_WORDS = ("None", "null")


def split_options(argv: list[str]) -> list[tuple[str, list[str], bool]]:
    """Group argv into (key, values, had_equals) triples; a value that is not preceded by an option
    is returned under the key '' so the caller can report it."""
    groups: list[tuple[str, list[str], bool]] = []
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            key, eq, value = token[2:].partition("=")
            groups.append((key, [value] if eq else [], bool(eq)))
        elif groups and not groups[-1][2]:
            groups[-1][1].append(token)
        else:
            groups.append(("", [token], False))
    return groups


def argv_to_dict(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Parse override options into {key: value} (strings, lists, True/False, None) plus error sentences.
    Keys keep the spelling given (old names are translated later); special flags are skipped."""
    out: dict[str, Any] = {}
    errors: list[str] = []
    for key, values, _ in split_options(argv):
        if key in SPECIAL_FLAGS:
            continue
        if not key:
            errors.append(f"command line: unexpected value '{values[0]}'; options look like --key value.")
            continue
        try:
            name, value = _convert(key, values)
        except ValueError as exc:
            errors.append(f"command line: {exc}")
            continue
        out[name] = value
    return out, errors


def _convert(key: str, values: list[str]) -> tuple[str, Any]:
    name = RENAMES.get(key, (key,))[0]
    fields = Arguments.model_fields
    if name not in fields and key.startswith("no_"):
        base = RENAMES.get(key[3:], (key[3:],))[0]
        if base in fields and bool in non_none(fields[base].annotation):
            if values:
                raise ValueError(f"--{key} takes no value (it sets {key[3:]} to false).")
            return key[3:], False
    if name not in fields:
        raise ValueError(unknown_key_message("command line", key, "--").removeprefix("command line: "))
    annotation = fields[name].annotation
    if not values:
        if bool in non_none(annotation):
            return key, True
        raise ValueError(f"--{key} needs a value.")
    if is_list(annotation):
        return key, _list_value(key, values, annotation)
    if len(values) > 1:
        raise ValueError(f"--{key} takes one value, got {len(values)}: {' '.join(values)}.")
    if values[0] in NONE_WORDS and allows_none(annotation):
        return key, None
    return key, values[0]


def _list_value(key: str, values: list[str], annotation: Any) -> Any:
    if len(values) > 1:
        return values
    text = values[0]
    if text in NONE_WORDS and allows_none(annotation):
        return None
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--{key}: '{text}' is not a JSON list ({exc.msg}).") from None
        return parsed
    return [v for v in re.split(r"[\s,]+", text) if v]
