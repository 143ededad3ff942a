import pytest

from ppokit.args import ConfigError
from ppokit.dialects.verl.hydra import (
    MISSING,
    flatten,
    looks_like_override,
    parse_override,
    parse_value,
    resolve_interpolations,
)


@pytest.mark.parametrize("text, value", [
    ("null", None), ("True", True), ("false", False), ("8", 8), ("-3", -3), ("1e-6", 1e-6), ("0.5", 0.5),
    ("'a b'", "a b"), ('"1"', "1"), ("[a,b]", ["a", "b"]), ("['console','wandb']", ["console", "wandb"]),
    ("[1,[2,3]]", [1, [2, 3]]), ("[]", []), ("{}", {}), ("{a: 1, b: x}", {"a": 1, "b": "x"}),
    ("models/Qwen2.5-0.5B", "models/Qwen2.5-0.5B"), ("seq-mean-token-sum-norm", "seq-mean-token-sum-norm"),
])
def test_values_follow_hydra(text, value):
    assert parse_value(text) == value


def test_override_forms():
    assert parse_override("a.b=1").op == "set"
    add = parse_override("+a.new='x'")
    assert (add.op, add.key, add.value) == ("add", "a.new", "x")
    assert parse_override("++a.b=2").op == "force"
    remove = parse_override("~a.b")
    assert (remove.op, remove.key, remove.value) == ("remove", "a.b", MISSING)


@pytest.mark.parametrize("token, expected", [
    ("a.b=1", True), ("max_steps=3", True), ("~a.b", True), ("+x=1", True), ("--max_steps", False),
    ("config/grpo.json", False), ("http://h:1/?a=b", False), ("grpo.json", False),
])
def test_which_tokens_are_overrides(token, expected):
    assert looks_like_override(token) is expected


def test_unbalanced_list_is_an_error_naming_the_token():
    with pytest.raises(ConfigError, match=r"'a=\[1,2': the value \[1,2 is not closed"):
        parse_override("a=[1,2")


def test_flatten_and_interpolation():
    flat = flatten({"a": {"b": 1, "c": {"d": "${a.b}"}}, "e": {}, "f": "run-${a.b}"})
    assert flat == {"a.b": 1, "a.c.d": "${a.b}", "e": {}, "f": "run-${a.b}"}
    assert resolve_interpolations(flat) == {"a.b": 1, "a.c.d": 1, "e": {}, "f": "run-1"}
    with pytest.raises(ConfigError, match="interpolation cycle"):
        resolve_interpolations({"x": "${y}", "y": "${x}"})


def test_split_argv_keeps_option_values():
    from ppokit.dialects.verl.overrides import split_argv

    dashed, tokens = split_argv(["c.json", "--eos_token", "a=b", "--bf16", "x.y=1", "--max_steps=3", "seed=2"])
    assert dashed == ["c.json", "--eos_token", "a=b", "--bf16", "--max_steps=3"]
    assert tokens == ["x.y=1", "seed=2"]
