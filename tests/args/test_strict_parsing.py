"""Strict reading of argument files and numbers (issue 25): a duplicated key names both lines, NaN/inf are refused
wherever a number is read, and an empty or null file is a sentence naming it."""

from __future__ import annotations

import pytest

from ppokit.args import ConfigError, load_arguments


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_duplicated_json_key_names_the_key_and_both_lines(tmp_path):
    path = write(tmp_path, "a.json", '{\n  "max_steps": 3,\n  "learning_rate": 0.003,\n  "learning_rate": 0.5\n}\n')
    with pytest.raises(ConfigError, match=rf"{path}:4: the key 'learning_rate' appears twice \(lines 3 and 4\)"):
        load_arguments(path)


def test_a_duplicated_yaml_key_names_the_key_and_both_lines(tmp_path):
    path = write(tmp_path, "a.yaml", "learning_rate: 0.003\nmax_steps: 3\nlearning_rate: 0.5\n")
    with pytest.raises(ConfigError, match=rf"{path}:3: the key 'learning_rate' appears twice \(lines 1 and 3\)"):
        load_arguments(path)


def test_the_same_key_in_two_mappings_is_fine(tmp_path):
    from ppokit.args import read_config_file

    assert read_config_file(write(tmp_path, "b.yaml", "a: {x: 1}\nb: {x: 2}\n")) == {"a": {"x": 1}, "b": {"x": 2}}
    assert read_config_file(write(tmp_path, "b.json", '{"a": {"x": 1}, "b": {"x": 2}}'))["b"] == {"x": 2}


@pytest.mark.parametrize("text", ['{\n "learning_rate": Infinity\n}', '{\n "learning_rate": NaN\n}',
                                  '{\n "learning_rate": -Infinity\n}'])
def test_json_nan_and_infinity_are_refused_with_the_line(tmp_path, text):
    path = write(tmp_path, "c.json", text)
    with pytest.raises(ConfigError, match=rf"{path}:2: -?(Infinity|NaN) is not a finite number"):
        load_arguments(path)


def test_yaml_inf_is_refused_naming_the_key(tmp_path):
    path = write(tmp_path, "d.yaml", "learning_rate: .inf\n")
    with pytest.raises(ConfigError, match=rf"{path}: learning_rate=inf is not a finite number"):
        load_arguments(path)


@pytest.mark.parametrize("value", ["inf", "Infinity", "INF"])
def test_cli_inf_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"command line: learning_rate=-?inf is not a finite number"):
        load_arguments(argv=["--learning_rate", value])


def test_python_override_inf_is_refused():
    with pytest.raises(ConfigError, match="overrides: max_grad_norm=inf is not a finite number"):
        load_arguments(overrides={"max_grad_norm": float("inf")})


@pytest.mark.parametrize(("name", "text"), [("e.yaml", ""), ("e.yaml", "# nothing\n"), ("f.yaml", "null\n"),
                                            ("g.json", "null")])
def test_an_empty_or_null_file_is_a_sentence_naming_it(tmp_path, name, text):
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError, match=rf"{path}: the argument file is empty \(or holds only null\)"):
        load_arguments(path)
