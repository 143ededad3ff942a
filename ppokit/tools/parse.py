"""Finding tool calls in a model turn, in the model's own format.

hermes (Qwen2.5, Hermes, and ppokit's default): one or more ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
blocks; ``qwen`` is the same. llama (Llama 3.1/3.2 JSON tool calling): a bare JSON object ``{"name": ...,
"parameters": {...}}``, optionally after ``<|python_tag|>``.

`call_end(text, fmt)` is where the calls of a turn end (what follows is dropped: a model that goes on to invent
the tool's answer must not be trained on it); `parse_calls` turns the calls into `ToolCall`s, a malformed one into
a call with `error` set (its text goes back to the model).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

TOOL_FORMATS = ("hermes", "qwen", "llama")
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


@dataclass
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)
    error: str | None = None  # why the call could not be understood


def _check(fmt: str) -> str:
    if fmt not in TOOL_FORMATS:
        raise ValueError(f"tool_format must be one of {', '.join(TOOL_FORMATS)}, got {fmt!r}")
    return "hermes" if fmt == "qwen" else fmt


def _first_json_object(text: str, start: int = 0) -> tuple[int, int] | None:
    """(start, end) of the first balanced {...} at or after `start` (strings respected), or None."""
    begin = text.find("{", start)
    while begin >= 0:
        depth, in_str, esc = 0, False, False
        for i in range(begin, len(text)):
            ch = text[i]
            if in_str:
                esc, in_str = (not esc and ch == "\\"), in_str and not (ch == '"' and not esc)
                continue
            if ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return begin, i + 1
        return None
    return None


def call_end(text: str, fmt: str = "hermes") -> int | None:
    """Index just past the turn's tool calls (hermes: the run of <tool_call> blocks from the first one, separated
    only by whitespace; llama: the first JSON object with a "name"), or None when the turn has no complete call."""
    fmt = _check(fmt)
    if fmt == "hermes":
        end, pos = None, text.find("<tool_call>")
        while pos >= 0:
            m = _HERMES.match(text, pos)
            if m is None:
                break
            end = m.end()
            nxt = len(text) - len(text[end:].lstrip())
            pos = nxt if text.startswith("<tool_call>", nxt) else -1
        return end
    span = _first_json_object(text)
    while span is not None:
        try:
            obj = json.loads(text[span[0]:span[1]])
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "name" in obj:
            return span[1]
        span = _first_json_object(text, span[1])
    return None


def _to_call(obj, raw: str) -> ToolCall:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall("?", {}, f'a tool call must be a JSON object with "name" and "arguments", got {raw.strip()[:80]!r}')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI style: the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return ToolCall(obj["name"], {}, f"the arguments of {obj['name']!r} are not valid JSON: {args[:80]!r}")
    if not isinstance(args, dict):
        return ToolCall(obj["name"], {}, f"the arguments of {obj['name']!r} must be a JSON object")
    return ToolCall(obj["name"], args)


def parse_calls(text: str, fmt: str = "hermes") -> list[ToolCall]:
    """The calls of one turn's text, in order (only up to `call_end`); [] when it makes none."""
    fmt = _check(fmt)
    end = call_end(text, fmt)
    if end is None:
        return []
    if fmt == "hermes":
        calls = []
        for raw in _HERMES.findall(text[:end]):
            try:
                calls.append(_to_call(json.loads(raw), raw))
            except json.JSONDecodeError as exc:
                calls.append(ToolCall("?", {}, f"the tool call is not valid JSON ({exc.msg}): {raw.strip()[:80]!r}"))
        return calls
    span = _first_json_object(text)
    while span is not None and span[1] <= end:
        raw = text[span[0]:span[1]]
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "name" in obj:
            return [_to_call(obj, raw)]
        span = _first_json_object(text, span[1])
    return []


def detect_format(chat_template: str | None, requested: str) -> str:
    """The tool format to use: the requested one, except that the default (hermes) follows a chat template that
    defines llama's JSON tool calling (it renders "parameters" for an ipython role and has no <tool_call>)."""
    template = chat_template or ""
    if requested == "hermes" and "<tool_call>" not in template and "ipython" in template and "parameters" in template:
        return "llama"
    return requested
