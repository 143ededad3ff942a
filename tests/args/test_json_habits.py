"""JSON with comments or trailing commas says so and where (file:line:col); a UTF-8 byte-order mark is accepted;
a phase given something else than rollout()'s batch, and a dataset smaller than one draw, are sentences."""

import json
import logging

import pytest

from ppokit.args import ConfigError, load_arguments
from ppokit.args.json_hints import json_habit
from ppokit.data import DataError
from ppokit.data.loader import PromptLoader, repeats_note


@pytest.mark.parametrize("text, where, what", [
    ('{\n  "max_steps": 3, // three\n  "seed": 1\n}', "2:19", "comments are not JSON"),
    ('{\n  /* a note */ "max_steps": 3\n}', "2:3", "comments are not JSON"),
    ('{\n  "max_steps": 3,\n  # hash comment\n  "seed": 1\n}', "3:3", "comments are not JSON"),
    ('{\n  "max_steps": 3,\n  "seed": 1,\n}', "3:12", "a trailing comma before '}' is not JSON"),
    ('{"report_to": ["none",\n ]}', "1:22", "a trailing comma before ']' is not JSON"),
])
def test_comments_and_trailing_commas_are_named_with_file_line_column(tmp_path, text, where, what):
    path = tmp_path / "args.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_arguments(str(path))
    assert str(err.value).startswith(f"{path}:{where}: invalid JSON: {what}")
    assert "Expecting property name" not in str(err.value)


def test_strings_holding_comment_or_comma_characters_are_not_habits():
    assert json_habit('{"url": "http://x/#a", "s": "a,}"}') is None
    assert json_habit('{"a": "\\"//", "b": [1, 2]}') is None


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "args.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"max_steps": 3, "seed": 7}).encode())
    args = load_arguments(str(path))
    assert (args.max_steps, args.seed) == (3, 7)
    data = tmp_path / "train.jsonl"
    data.write_bytes(b"\xef\xbb\xbf" + b'{"src": "a"}\n{"src": "b"}\n')
    from ppokit.data import load_datasets

    assert len(load_datasets(str(data))) == 2


def test_a_dataset_smaller_than_a_draw_says_how_often_each_prompt_repeats(caplog):
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        loader = PromptLoader([{"src": "only"}], batch_size=8)
    assert loader.note == repeats_note(1, 8)
    assert "has 1 prompt(s) but each step draws 8: every step trains on each prompt 8 times" in loader.note
    assert any(loader.note == r.getMessage() for r in caplog.records)
    assert "2 or 3 times" in repeats_note(3, 8) and repeats_note(8, 8) is None
    assert len(loader.next_batch()) == 8
    with pytest.raises(DataError):
        PromptLoader([], batch_size=8)


def test_a_phase_given_no_batch_is_a_sentence(tiny_model_dir, tmp_path):
    from ppokit.errors import PpokitError
    from ppokit.session import Session
    from ppokit.testing import letter_a

    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say {i}:"}) + "\n" for i in range(4)))
    s = Session(load_arguments(None, overrides=dict(
        actor_model_name_or_path=tiny_model_dir, train_datasets=str(data), global_batch_size=4,
        global_mini_batch_size=4, rollout_n=1, max_dec_len=4, max_prompt_len=16, max_length=32,
        output_dir=str(tmp_path / "out"), report_to=["none"], disable_tqdm=True)), reward_functions=[letter_a])
    for call in ("compute_advantages", "update", "score"):
        with pytest.raises(PpokitError, match=rf"{call}\(\) needs the batch that rollout\(\) returned, got NoneType: "
                                              rf"batch = s.rollout\(\); s.{call}\(batch\)"):
            getattr(s, call)(None)
    s.close()
