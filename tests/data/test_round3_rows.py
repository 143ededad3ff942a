"""Rows a tokenizer cannot take, refused with file:line:field (issue 25): a `messages` user turn without content
(like an empty `prompt`) and a lone surrogate anywhere in the prompt."""

from __future__ import annotations

import pytest

from ppokit.data import DataError, load_datasets


@pytest.mark.parametrize("content", ["", "   ", [{"type": "text", "text": ""}]])
def test_a_messages_row_with_empty_content_is_refused_like_an_empty_prompt(write_jsonl, content):
    path = write_jsonl([{"messages": [{"role": "user", "content": "fine"}]},
                        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": content}]}])
    with pytest.raises(DataError, match=rf"{path}:2: 'messages'\[1\] 'content' is empty"):
        load_datasets(path)


@pytest.mark.parametrize(("row", "field"), [
    ('{"prompt": "count \\ud800 to 3"}', r"'prompt'"),
    ('{"src": "hi \\udfff"}', r"'src' turn 0 \(user\)"),
    ('{"messages": [{"role": "user", "content": "x\\ud83d"}]}', r"'messages' turn 0 \(user\)"),
])
def test_a_lone_surrogate_names_file_line_and_field(write_jsonl, row, field):
    path = write_jsonl(['{"prompt": "ok"}', row])
    with pytest.raises(DataError, match=rf"{path}:2: {field} holds a lone surrogate .* not valid Unicode"):
        load_datasets(path)


def test_a_whole_emoji_is_fine(write_jsonl):
    path = write_jsonl(['{"prompt": "smile \\ud83d\\ude00"}'])
    assert load_datasets(path)[0]["prompt"] == "smile \U0001f600"
