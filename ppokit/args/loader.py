"""``load_arguments``: file, then command line, then overrides -> translated -> validated -> PaddleNLP's
post-init rules -> consistency checks. Every user mistake becomes one ConfigError listing all problems."""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .arguments import Arguments
from .argv import argv_to_dict
from .checks import consistency_errors
from .errors import ConfigError
from .fieldinfo import allows_none, type_name
from .history import early_errors, merged_value_rules
from .rules import derive
from .translate import ignored_notes, translate

logger = logging.getLogger("ppokit")
_LOGGED: set[str] = set()


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a JSON or YAML argument file into a dict; ConfigError names the file and the problem (also a
    duplicated key, with both lines, an empty or `null` file, and NaN/Infinity in JSON)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise ConfigError(f"{p}: expected a .json, .yaml or .yml argument file.")
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark (as Windows editors write one) is not content
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the argument file ({exc.strerror or exc}).") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: the argument file is not UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    data = _parse_json(p, text) if suffix == ".json" else _parse_yaml(p, text)
    if data is None:
        raise ConfigError(f"{p}: the argument file is empty (or holds only null); it must be a mapping of "
                          "key: value, e.g. actor_model_name_or_path: ... (an empty file is usually a truncated copy).")
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of key: value, not {type(data).__name__}.")
    return data


def _key_lines(text: str, key: str) -> list[int]:
    """1-based lines where `"key":` (JSON) appears."""
    pattern = re.compile(r'"' + re.escape(json.dumps(key)[1:-1]) + r'"\s*:')
    return [text.count("\n", 0, m.start()) + 1 for m in pattern.finditer(text)]


def _parse_json(p: Path, text: str) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                lines = _key_lines(text, key)
                where = f"lines {lines[0]} and {lines[1]}" if len(lines) > 1 else "twice in one object"
                raise ConfigError(f"{p}:{lines[-1] if lines else '?'}: the key {key!r} appears twice ({where}); "
                                  "JSON would silently keep the last one: delete one of them.")
            out[key] = value
        return out

    def no_constant(name: str) -> Any:
        line = next((i for i, row in enumerate(text.splitlines(), 1) if re.search(rf"(?<![\w\"]){name}\b", row)), "?")
        raise ConfigError(f"{p}:{line}: {name} is not a finite number; a value here must be finite (JSON itself "
                          "has no NaN or Infinity).")

    try:
        return json.loads(text, object_pairs_hook=unique, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        from .json_hints import json_habit

        habit = json_habit(text)
        if habit is not None:
            raise ConfigError(f"{p}:{habit[0]}:{habit[1]}: invalid JSON: {habit[2]}.") from None
        raise ConfigError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}.") from None


def _parse_yaml(p: Path, text: str) -> Any:
    import yaml

    try:
        _check_yaml_keys(p, yaml.compose(text, Loader=yaml.SafeLoader))
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}: invalid YAML: {problem}.") from None


def _check_yaml_keys(p: Path, node: Any) -> None:
    """A key given twice in one YAML mapping is a ConfigError naming it and both lines (YAML keeps the last)."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                line = key.start_mark.line + 1
                if key.value in seen:
                    raise ConfigError(f"{p}:{line}: the key {key.value!r} appears twice (lines {seen[key.value]} and "
                                      f"{line}); YAML would silently keep the last one: delete one of them.")
                seen[key.value] = line
            _check_yaml_keys(p, value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_yaml_keys(p, item)


def env_world_size() -> int:
    """World size from the launcher's WORLD_SIZE variable (1 when unset)."""
    try:
        return max(int(os.environ.get("WORLD_SIZE", "1")), 1)
    except ValueError:
        return 1


def load_arguments(path: str | os.PathLike | None = None, overrides: dict | None = None,
                   argv: list[str] | None = None, drop: tuple[str, ...] = ()) -> Arguments:
    """Load arguments from ``path`` (JSON/YAML), then ``argv`` (command-line strings such as
    ``["--max_steps", "5"]``; a leading non-option is taken as the file when ``path`` is None), then
    ``overrides`` (Python values); later sources win. ``drop`` lists file keys to leave out (``~key``).
    Raises ConfigError on any user mistake."""
    argv = list(argv or [])
    if path is None and argv and not argv[0].startswith("--"):
        path, argv = argv[0], argv[1:]
    sources: list[tuple[str, dict[str, Any], str]] = []
    if path is not None:
        sources.append((str(path), _without(read_config_file(path), drop, path), ""))
    if argv:
        cli_values, errors = argv_to_dict(argv)
        if errors:
            raise ConfigError("\n".join(errors))
        sources.append(("command line", cli_values, "--"))
    if overrides:
        sources.append(("overrides", dict(overrides), ""))
    values, origin, notes = _merge(sources)
    notes += merged_value_rules(values, origin, [s[0] for s in sources], lambda: _runs_on_cpu(values.get("device")))
    args = _validate(values, origin)
    updates, rule_notes = _derive(args, origin)
    args = _validate({**values, **updates}, origin)
    args._given = frozenset(values)
    _refuse_non_finite(args, origin)
    notes += ignored_notes({k: getattr(args, k) for k in values}) + rule_notes
    problems = consistency_errors(args) + early_errors(args)
    if problems:
        where = str(path) if path is not None else "arguments"
        raise ConfigError("\n".join(f"{where}: {p}" for p in problems))
    args.notes.extend(notes)
    _log_notes(notes)
    return args


def _without(values: dict[str, Any], drop: tuple[str, ...], path) -> dict[str, Any]:
    missing = [key for key in drop if key not in values]
    if missing:
        raise ConfigError(f"{path}: cannot remove {', '.join(missing)} (~key): the file has no such key.")
    return {k: v for k, v in values.items() if k not in drop}


def _runs_on_cpu(device: Any) -> bool:
    """True when training will run on the CPU: device 'cpu', or no device given and no CUDA here."""
    if isinstance(device, str) and device:
        return device == "cpu"
    import torch

    return not torch.cuda.is_available()


def _merge(sources: list[tuple[str, dict[str, Any], str]]) -> tuple[dict, dict, list[str]]:
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    notes: list[str] = []
    errors: list[str] = []
    for source, raw, prefix in sources:
        out, src_notes, src_errors = translate(raw, source, prefix)
        notes += src_notes
        errors += src_errors
        values.update(out)
        origin.update(dict.fromkeys(out, source))
    if errors:
        raise ConfigError("\n".join(errors))
    return values, origin, notes


def _validate(values: dict[str, Any], origin: dict[str, str]) -> Arguments:
    try:
        return Arguments.model_validate(values)
    except ValidationError as exc:
        raise ConfigError("\n".join(_describe(e, values, origin) for e in exc.errors())) from None


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    return False


def _refuse_non_finite(args: Arguments, origin: dict[str, str]) -> None:
    """inf / nan (from `--learning_rate inf`, YAML's .inf, a Python override) is refused wherever a number is read."""
    bad = [key for key in type(args).model_fields if _non_finite(getattr(args, key))]
    if bad:
        raise ConfigError("\n".join(f"{origin.get(k, 'arguments')}: {k}={getattr(args, k)!r} is not a finite number; "
                                    "give a finite value." for k in bad))


def _derive(args: Arguments, origin: dict[str, str]) -> tuple[dict, list[str]]:
    try:
        return derive(args, env_world_size())
    except ConfigError as exc:
        sources = sorted(set(origin.values())) or ["defaults"]
        raise ConfigError(f"{' + '.join(sources)}: {exc}") from None


def _describe(error: dict, values: dict[str, Any], origin: dict[str, str]) -> str:
    """One pydantic error as 'SOURCE: key=value is not valid: expected TYPE (detail).'"""
    key = str(error["loc"][0]) if error["loc"] else "?"
    source = origin.get(key, "arguments")
    field = Arguments.model_fields.get(key)
    if field is None:
        return f"{source}: {error['msg']}."
    expected = type_name(field.annotation)
    value = values.get(key, error.get("input"))
    if value is None and not allows_none(field.annotation):
        return (f"{source}: {key} is null but must be {expected}; remove the key to use the default "
                f"{field.get_default(call_default_factory=True)!r}.")
    detail = error["msg"]
    if error.get("type") == "value_error":  # a validator's own sentence says what is expected
        return f"{source}: {key}={value!r} is not valid: {detail.removeprefix('Value error, ')}."
    if len(error["loc"]) > 1:
        detail += f" (at item {error['loc'][1]})"
    return f"{source}: {key}={value!r} is not valid: expected {expected} ({detail})."


def _log_notes(notes: list[str]) -> None:
    for note in notes:
        if note not in _LOGGED:
            _LOGGED.add(note)
            logger.info(note)
