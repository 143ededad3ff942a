"""Hydra-style command-line overrides, as verl's launch lines use them.

    key=value       set (dotted keys address a nested config: ``actor_rollout_ref.rollout.n=8``)
    +key=value      add a key (an error where the key already exists, as in Hydra)
    ++key=value     set or add
    ~key            remove (``~key=value`` removes only when the value matches)

Values follow Hydra's grammar where verl lines use it: ``null``, ``true/false/True/False``, integers,
floats (``1e-6`` too), quoted strings (``'a b'``, ``"x"``), lists ``[a,b,'c d']`` (nested), ``{}``/``[]``,
``${other.key}`` interpolation of another key and OmegaConf's ``${oc.select:other.key, default}``.
Anything else is a plain string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from ppokit.args.errors import ConfigError

_TOKEN = re.compile(r"^(\+\+|\+|~)?([A-Za-z_][\w\-]*(?:\.[\w\-]+)*)(?:=(.*))?$", re.DOTALL)
_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^[-+]?(inf|nan)$", re.IGNORECASE)
_INTERPOLATION = re.compile(r"^\$\{([\w.\-]+)\}$")
_EMBEDDED = re.compile(r"\$\{([\w.\-]+)\}")
_SELECT = re.compile(r"^\$\{oc\.select:\s*([\w.\-]+)\s*(?:,(.*))?\}$", re.DOTALL)
MISSING = object()


@dataclass(frozen=True)
class Override:
    """One parsed override token."""

    op: Literal["set", "add", "force", "remove"]
    key: str
    value: Any  # MISSING for '~key'
    token: str


def looks_like_override(token: str) -> bool:
    """True for 'a.b=v', '+a=v', '++a=v', '~a' and 'a=v' tokens (never for '--options' or file paths)."""
    if token.startswith("-") or not _TOKEN.match(token):
        return False
    return "=" in token or token.startswith("~")


def parse_override(token: str) -> Override:
    """Parse one token; ConfigError names the token when it is not an override."""
    match = _TOKEN.match(token)
    if not match or ("=" not in token and match.group(1) != "~"):
        raise ConfigError(f"command line: '{token}' is not an override; write key=value, +key=value or ~key.")
    prefix, key, raw = match.groups()
    op = {"+": "add", "++": "force", "~": "remove"}.get(prefix or "", "set")
    value = MISSING if raw is None else parse_value(raw, token)
    return Override(op, key, value, token)


def parse_value(text: str, token: str = "") -> Any:
    """A Hydra value: null, booleans, numbers, quoted strings, lists; else the text itself."""
    text = text.strip()
    if text in ("null", "~", "None"):
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.startswith("[") or text.startswith("{"):
        return _parse_collection(text, token)
    return text


def _parse_collection(text: str, token: str) -> Any:
    close = "]" if text[0] == "[" else "}"
    if not text.endswith(close):
        raise ConfigError(f"command line: '{token or text}': the value {text} is not closed with '{close}'.")
    items = _split_top_level(text[1:-1], token or text)
    if close == "]":
        return [parse_value(item, token) for item in items]
    out = {}
    for item in items:
        key, colon, value = item.partition(":")
        if not colon:
            raise ConfigError(f"command line: '{token or text}': dictionary item '{item}' needs key: value.")
        out[key.strip()] = parse_value(value, token)
    return out


def _split_top_level(body: str, token: str) -> list[str]:
    """Split on commas outside quotes and brackets."""
    items, depth, quote, current = [], 0, "", ""
    for char in body:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        current += char
    if quote or depth:
        raise ConfigError(f"command line: '{token}': unbalanced quotes or brackets in the value.")
    if current.strip() or items:
        items.append(current)
    return [item.strip() for item in items]


def flatten(tree: dict[str, Any], prefix: str = "", leaves: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A nested mapping as {dotted.key: value}; mappings under a key in ``leaves`` stay whole."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and name not in leaves:
            out.update(flatten(value, name + ".", leaves))
        else:
            out[name] = value
    return out


def resolve_interpolations(values: dict[str, Any]) -> dict[str, Any]:
    """Replace values written ``${other.key}`` by that key's value (chains followed, cycles refused)."""
    out = {key: _select(key, value, values) for key, value in values.items()}
    for key in values:
        seen = [key]
        while isinstance(out[key], str) and (match := _INTERPOLATION.match(out[key])):
            target = absolute_key(seen[-1], match.group(1))
            if target not in values:
                raise ConfigError(f"{key}={out[key]}: the interpolated key '{target}' does not exist.")
            if target in seen:
                raise ConfigError(f"{key}: interpolation cycle {' -> '.join([*seen, target])}.")
            seen.append(target)
            out[key] = out[target]
        if isinstance(out[key], str) and "${" in out[key]:
            out[key] = _EMBEDDED.sub(lambda m, key=key: _embedded(key, m.group(1), out), out[key])
    return out


def absolute_key(holder: str, target: str) -> str:
    """OmegaConf's relative interpolation (``${.sibling}``, ``${..uncle}``) as a dotted key from the root."""
    if not target.startswith("."):
        return target
    rest = target.lstrip(".")
    parts = holder.split(".")[:-1]
    parts = parts[:len(parts) - (len(target) - len(rest) - 1)]
    return ".".join([*parts, rest])


def _select(key: str, value: Any, values: dict[str, Any]) -> Any:
    """OmegaConf's ``${oc.select:key, default}`` (verl 0.6+ configs): the key's value (as an interpolation of
    it, resolved below) when it exists, else the default."""
    match = _SELECT.match(value) if isinstance(value, str) else None
    if match is None:
        return value
    target, default = absolute_key(key, match.group(1)), match.group(2)
    if target in values:
        return "${" + target + "}"
    return None if default is None else parse_value(default)


def _embedded(key: str, target: str, values: dict[str, Any]) -> str:
    if target not in values or (isinstance(values[target], str) and "${" in values[target]):
        raise ConfigError(f"{key}: the interpolated key '{target}' does not exist or is itself interpolated.")
    return str(values[target])
