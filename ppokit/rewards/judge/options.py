"""reward_server.py's judge options, generated from the one declaration of the judge's keys
(`ppokit.args.judge.JudgeArguments`): the config key ``judge_<name>`` is ``--judge-<name>`` (``judge_model`` is
``--judge``), with the key's description as help, its type, choices and default; the parsed values are checked by
the same model as a config's, so a value the config refuses the server refuses too."""

from __future__ import annotations

import argparse
import typing
from typing import Any, Literal

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from ppokit.args.fieldinfo import non_none
from ppokit.args.judge import JudgeArguments

MODEL_KEY = "judge_model"


def flag(key: str) -> str:
    """The server option of config key ``key``: judge_model -> --judge, judge_max_new_tokens -> --judge-max-new-tokens."""
    return "--judge" if key == MODEL_KEY else "--" + key.replace("_", "-")


def add_judge_options(parser: argparse.ArgumentParser, scorers: Any) -> None:
    """--judge into ``scorers`` (the mutually exclusive group of scorers), every other judge key into a group
    of its own."""
    fields = JudgeArguments.model_fields
    scorers.add_argument(flag(MODEL_KEY), metavar="MODEL", help=_help(fields[MODEL_KEY]))  # ns.judge
    group = parser.add_argument_group("judge (with --judge; each --judge-X is the config key judge_X)")
    for key, field in fields.items():
        if key != MODEL_KEY:
            group.add_argument(flag(key), dest=key, **_argparse_options(key, field))


def judge_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The judge keys of a parsed command line (judge_model aside), checked by JudgeArguments; ValueError names
    the option and what it expects."""
    values = {key: getattr(ns, key) for key in JudgeArguments.model_fields if key != MODEL_KEY}
    try:
        checked = JudgeArguments.model_validate(values)
    except ValidationError as exc:
        problems = [f"{flag(str(e['loc'][0]))} {values.get(e['loc'][0])!r}: {e['msg']}" for e in exc.errors()]
        raise ValueError("; ".join(problems)) from None
    return checked.model_dump(mode="json", exclude={MODEL_KEY})


def _help(field: FieldInfo) -> str:
    return (field.description or "").replace("%", "%%")  # argparse formats help with %


def _argparse_options(key: str, field: FieldInfo) -> dict[str, Any]:
    """add_argument's keywords for one field: store_true for a bool, choices for a Literal, append for a list,
    nargs for a tuple, else the type itself."""
    default = field.get_default(call_default_factory=True)
    options: dict[str, Any] = {"default": default, "help": _help(field) + " Default: %(default)s."}
    kinds = non_none(field.annotation)
    if len(kinds) != 1:
        raise TypeError(f"{key}: a server option needs one type besides None, not {field.annotation}")
    kind = kinds[0]
    origin, members = typing.get_origin(kind), typing.get_args(kind)
    if kind is bool:
        return {**options, "action": argparse.BooleanOptionalAction if default else "store_true"}
    if origin is Literal:
        return {**options, "choices": members}
    if origin is list:
        if default is not None:  # argparse's append would add to the default list
            raise TypeError(f"{key}: a list option must default to None")
        return {**options, "action": "append", "type": members[0], "metavar": "ITEM"}
    if origin is tuple:
        if len(set(members)) != 1:
            raise TypeError(f"{key}: a tuple option needs one member type, not {kind}")
        return {**options, "nargs": len(members), "type": members[0],
                "metavar": tuple(m.__name__.upper() for m in members)}
    return {**options, "type": kind}
