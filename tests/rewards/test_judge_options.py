"""The judge's keys are declared once (JudgeArguments): a config and reward_server.py accept each of them, with
the same default, the same value and the same refusal."""

from __future__ import annotations

import typing
from typing import Literal

import pytest

from ppokit.args import load_arguments
from ppokit.args.fieldinfo import non_none
from ppokit.args.judge import JudgeArguments
from ppokit.rewards.cli import _spec, build_parser, main
from ppokit.rewards.judge.options import MODEL_KEY, flag

KEYS = [k for k in JudgeArguments.model_fields if k != MODEL_KEY]


def a_value(key: str):
    """(a value other than the default, its command-line tokens) for ``key``, chosen from its type alone."""
    field = JudgeArguments.model_fields[key]
    default = field.get_default()
    kind = non_none(field.annotation)[0]
    origin, members = typing.get_origin(kind), typing.get_args(kind)
    if kind is bool:
        return (not default), [flag(key)] if not default else [f"--no-{flag(key)[2:]}"]
    if origin is Literal:
        choice = next(m for m in members if m != default)
        return choice, [flag(key), choice]
    if origin is list:
        return ["is it short", "is it kind"], [flag(key), "is it short", flag(key), "is it kind"]
    if origin is tuple:
        return [0.0, 5.0], [flag(key), "0", "5"]
    value = {int: 3, float: 0.5, str: "pairwise"}[kind]
    assert value != default, key
    return value, [flag(key), str(value)]


def test_every_judge_key_is_a_server_option_with_the_config_default():
    ns = build_parser().parse_args(["--judge", "m"])
    options = _spec(ns)["judge_options"]
    config = load_arguments(overrides={})
    assert sorted(options) == sorted(KEYS)
    for key in KEYS:
        want = JudgeArguments.model_fields[key].get_default()
        assert getattr(ns, key) == want and getattr(config, key) == want, key
        assert options[key] == (list(want) if isinstance(want, tuple) else want), key
    assert _spec(ns)["judge"] == "m" == ns.judge


def test_every_judge_key_reads_the_same_value_from_a_config_and_the_server_command_line():
    for key in KEYS:
        value, tokens = a_value(key)
        from_cli = _spec(build_parser().parse_args(["--judge", "m", *tokens]))["judge_options"][key]
        from_config = getattr(load_arguments(overrides={key: value}), key)
        assert from_cli == (list(from_config) if isinstance(from_config, tuple) else from_config), key


def test_server_help_is_the_key_description():
    text = build_parser().format_help().replace("\n", " ")
    for key in KEYS:
        first_words = " ".join(JudgeArguments.model_fields[key].description.split()[:3])
        assert flag(key) in text and first_words in " ".join(text.split()), key


@pytest.mark.parametrize(("tokens", "named"), [
    (["--judge-max-new-tokens", "0"], "--judge-max-new-tokens 0: Input should be greater than or equal to 1"),
    (["--judge-temperature", "-1"], "--judge-temperature -1.0: Input should be greater than or equal to 0"),
])
def test_a_value_the_config_refuses_the_server_refuses_with_the_option_named(tokens, named, capsys):
    key = tokens[0][2:].replace("-", "_")
    with pytest.raises(Exception, match="greater than or equal"):
        load_arguments(overrides={key: float(tokens[1])})
    with pytest.raises(SystemExit) as stop:
        main(["--judge", "m", *tokens])
    assert stop.value.code == 2 and named in capsys.readouterr().err
