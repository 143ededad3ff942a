"""Tool declarations: Python functions (schema from type hints + docstring) and verl's tool config YAML.

A `Tool` has verl's life cycle, all async: ``create(instance_id, **create_kwargs)`` once per trajectory,
``execute(instance_id, arguments)`` per call -> (text, step reward, metrics), ``calc_reward(instance_id)``
and ``release(instance_id)`` at the end. A plain function tool: execute calls it with the
arguments and returns ``str(result)``; its step reward is 0.

State: one verl tool object serves every row, and its ``create`` gives each row (trajectory) its own instance id,
so per-row state lives under that id and ends at ``release``. A plain function is one object shared by every row,
turn and run of the process: whatever it keeps at module level (a counter, a cache) is seen by all of them (docs/tool_use.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ppokit.errors import PpokitError
from ppokit.userfile import import_user_file


class ToolError(PpokitError):
    """A tool that cannot be declared or loaded (bad file, function, class or schema)."""


JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}


@dataclass
class Tool:
    """One callable tool: its OpenAI function schema and an object with verl's async tool methods."""

    name: str
    schema: dict  # {"type": "function", "function": {"name", "description", "parameters"}}
    impl: Any  # has async create / execute / calc_reward / release (verl's BaseTool methods)
    sync: bool = False  # a plain function: impl.execute_sync runs in a worker thread
    origin: str = ""  # where it was declared (e.g. "tools 'a.py:add'"), for the error when two share a name


def declare(found: dict[str, Tool], tool: Tool) -> None:
    """Add `tool` to `found` (name -> Tool). The model calls a tool by its name, so a second tool of one name is
    refused wherever the two were declared (two files, one file twice, tools and tool_config_path, two YAML entries)."""
    first = found.get(tool.name)
    if first is not None:
        raise ToolError(f"tool {tool.name!r} is declared twice: in {first.origin or 'an earlier declaration'} and "
                        f"in {tool.origin or 'a later one'}; the model calls a tool by its name, so each needs its "
                        "own: rename one, or declare it once")
    found[tool.name] = tool


class FunctionTool:
    """verl's tool methods around a plain Python function (stateless: create/release do nothing)."""

    def __init__(self, fn: Callable):
        self.fn = fn

    async def create(self, instance_id: str | None = None, **kwargs):
        return instance_id, None

    def execute_sync(self, arguments: dict):
        return str(self.fn(**arguments)), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        return None


def _json_type(hint) -> dict:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _json_type(args[0]) if len(args) == 1 else {"anyOf": [_json_type(a) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    if origin in (list, tuple):
        item = typing.get_args(hint)
        return {"type": "array", **({"items": _json_type(item[0])} if item else {})}
    if hint in JSON_TYPES:
        return {"type": JSON_TYPES[hint]}
    if origin is dict:
        return {"type": "object"}
    raise ToolError(f"tool parameter type {hint!r} has no JSON schema type; use int, float, str, bool, list or dict")


def _doc_args(doc: str) -> dict[str, str]:
    """Per-argument descriptions from a Google-style 'Args:' section (`name: text` or `name (type): text`)."""
    out, inside = {}, False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:"):
            inside = True
            continue
        if inside:
            m = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.+)$", stripped)
            if m:
                out[m.group(1)] = m.group(3)
            elif stripped.endswith(":") or not stripped:
                inside = bool(out) and not stripped.endswith(":")
    return out


def function_tool(fn: Callable) -> Tool:
    """A Tool from a Python function: every parameter needs a type hint; the docstring's first paragraph is the
    description and its 'Args:' lines describe the parameters."""
    name = fn.__name__
    doc = inspect.getdoc(fn) or ""
    if not doc:
        raise ToolError(f"tool function {name!r} has no docstring; its first line tells the model what it does")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # e.g. a hint naming a class the tool's module does not import
        raise ToolError(f"tool function {name!r}: a parameter's type hint cannot be resolved ({type(exc).__name__}: "
                        f"{exc}); use int, float, str, bool, list or dict, or import the named type in the tool's "
                        "file") from exc
    described = _doc_args(doc)
    props, required = {}, []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ToolError(f"tool function {name!r}: *args/**kwargs cannot be described to the model")
        if p.name not in hints:
            raise ToolError(f"tool function {name!r}: parameter {p.name!r} needs a type hint (e.g. {p.name}: int)")
        props[p.name] = {**_json_type(hints[p.name]), **({"description": described[p.name]} if p.name in described
                                                        else {})}
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    description = doc.split("\n\n")[0].replace("\n", " ").strip()
    schema = {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}
    return Tool(name=name, schema=schema, impl=FunctionTool(fn), sync=True)


def _import_file(path: str, what: str):
    found = Path(path)
    if not found.is_file():
        raise ToolError(f"{what}: file {path!r} not found (relative paths are from the working directory)")
    try:
        return import_user_file(found, "ppokit_tools")
    except Exception as exc:
        raise ToolError(f"{what}: importing {path!r} failed: {type(exc).__name__}: {exc}") from exc


BUNDLED = {"multiply": "ppokit.tasks.multiply:multiply"}


def load_function_tools(spec: str) -> dict[str, Tool]:
    """Tools from 'file.py:fn1,fn2[;other.py:fn3]' or a bundled name ('multiply'), as {name: Tool}."""
    tools: dict[str, Tool] = {}
    for part in [p.strip() for p in spec.split(";") if p.strip()]:
        if part in BUNDLED:
            module_name, fn_name = BUNDLED[part].split(":")
            fns = [getattr(importlib.import_module(module_name), fn_name)]
        else:
            path, sep, names = part.rpartition(":")
            if not sep or not path or not names:
                raise ToolError(f"tools: {part!r} is not 'file.py:function[,function]' nor a bundled tool "
                                f"({', '.join(sorted(BUNDLED))})")
            fn_names = [n.strip() for n in names.split(",") if n.strip()]
            _refuse_comma_between_files(part, path, fn_names)
            module = _import_file(path, f"tools {part!r}")
            fns = []
            for fn_name in fn_names:
                fn = getattr(module, fn_name, None)
                if not callable(fn):
                    raise ToolError(f"tools: {path!r} has no function {fn_name!r}")
                fns.append(fn)
        for fn in fns:
            declare(tools, replace(function_tool(fn), origin=f"tools {part!r}"))
    return tools


def _refuse_comma_between_files(part: str, path: str, fn_names: list[str]) -> None:
    """'a.py:add,b.py:mul' (the comma that separates reward_functions): tool files are separated by ';', the comma
    separates functions of one file."""
    if ("," in path and ":" in path) or any(n.endswith(".py") for n in fn_names):
        fixed = re.sub(r",(?=[^,:;]+\.py(:|$))", ";", part)
        raise ToolError(f"tools: {part!r} names more than one file; separate tool files with ';' (the comma "
                        f"separates functions of one file), e.g. {fixed!r}")


def _resolve_class(class_name: str, where: str):
    module_name, _, attr = class_name.rpartition(".")
    if not module_name:
        raise ToolError(f"{where}: class_name {class_name!r} must be 'package.module.ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolError(f"{where}: cannot import {module_name!r} for class_name {class_name!r}: {exc}") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise ToolError(f"{where}: module {module_name!r} has no class {attr!r}")
    return cls


def _construct(cls, class_name: str, config: dict, schema: dict, where: str):
    """`cls(config=..., tool_schema=...)` as verl builds a tool, with a sentence when the constructor differs."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        missing = [k for k in ("config", "tool_schema") if k not in params]
        if missing:
            raise ToolError(f"{where}: {class_name}'s constructor takes ({', '.join(params)}) but verl builds a tool "
                            f"as {class_name}(config=..., tool_schema=...); give __init__ the parameters "
                            f"{' and '.join(missing)} (as verl's BaseTool.__init__(self, config, tool_schema))")
    try:
        return cls(config=config, tool_schema=schema)
    except Exception as exc:
        raise ToolError(f"{where}: building {class_name}(config=..., tool_schema=...) failed: "
                        f"{type(exc).__name__}: {exc}") from exc


def load_tool_config(path: str) -> dict[str, Tool]:
    """Tools from verl's tool config YAML: ``tools: [{class_name, config, tool_schema}]``. Each class is built as
    verl builds it, ``cls(config=config, tool_schema=schema)`` (schema as a plain dict), and must have async
    create/execute/calc_reward/release."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ToolError(f"tool_config_path: {path!r} not found") from exc
    except yaml.YAMLError as exc:
        raise ToolError(f"tool_config_path: {path!r} is not valid YAML: {exc}") from exc
    entries = data.get("tools") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ToolError(f"{path}: expected a top-level 'tools:' list of {{class_name, config, tool_schema}}")
    tools: dict[str, Tool] = {}
    for i, entry in enumerate(entries):
        where = f"{path}: tools[{i}]"
        if not isinstance(entry, dict) or "class_name" not in entry or "tool_schema" not in entry:
            raise ToolError(f"{where} needs 'class_name' and 'tool_schema' (an OpenAI function schema)")
        schema = entry["tool_schema"]
        name = (schema.get("function") or {}).get("name") if isinstance(schema, dict) else None
        if not name:
            raise ToolError(f"{where}: tool_schema needs function.name (OpenAI function schema)")
        cls = _resolve_class(str(entry["class_name"]), where)
        impl = _construct(cls, str(entry["class_name"]), entry.get("config") or {}, schema, where)
        missing = [m for m in ("create", "execute", "calc_reward", "release") if not callable(getattr(impl, m, None))]
        if missing:
            raise ToolError(f"{where}: {entry['class_name']} lacks {', '.join(missing)} (verl's BaseTool methods)")
        declare(tools, Tool(name=name, schema=schema, impl=impl, origin=f"tool_config_path {where}"))
    return tools


def load_tools(tools: str | None, tool_config_path: str | None) -> dict[str, Tool]:
    """Every tool the run declares (function tools, then the YAML's); an error when there are none."""
    found: dict[str, Tool] = {}
    if tools:
        found.update(load_function_tools(tools))
    if tool_config_path:
        for tool in load_tool_config(tool_config_path).values():
            declare(found, tool)
    if not found:
        raise ToolError("multi_turn is on but no tool is declared; set tools ('file.py:fn') or tool_config_path")
    return found
