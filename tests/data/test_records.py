"""Row formats -> Records, and the exact prompts they render to (tiny ChatML tokenizer)."""

import pytest

from ppokit.data import DataError, is_templated, load_datasets, render_prompt, row_to_record
from ppokit.testing import tiny_tokenizer

TOK = tiny_tokenizer()

SEARCH = {
    "src": ["Hi", "[<search-res>] The average temperature in Paris during summer is 25°C"],
    "tgt": ["Hello! How can I assist you today?"],
}
SLOGANS = {
    "src": ["I need you to help me come up with some creative slogans to capture the market."],
    "tgt": [],
}


def test_conversation_with_markup_renders_in_turn_order(write_jsonl):
    [record] = load_datasets(write_jsonl([SEARCH]))
    assert render_prompt(record, TOK) == (
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello! How can I assist you today?<|im_end|>\n"
        "<|im_start|>user\n[<search-res>] The average temperature in Paris during summer is 25°C<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert record["label"] is None and record["task"] is None and record["fields"] == {}
    assert record["source"].endswith("train.jsonl:1")


def test_single_turn_with_empty_tgt(write_jsonl):
    [record] = load_datasets(write_jsonl([SLOGANS]))
    assert render_prompt(record, TOK) == (
        "<|im_start|>user\nI need you to help me come up with some creative slogans to capture the market.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert record["label"] is None


def test_equal_turns_make_the_last_tgt_the_reference():
    record, kind = row_to_record(
        {"src": ["Q1", "Q2"], "tgt": ["A1", "REF"], "task": "kk", "id": 7}, "f.jsonl:3"
    )
    assert kind == "src/tgt with reference"
    assert record == {
        "messages": [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "Q2"},
        ],
        "label": "REF",
        "task": "kk",
        "source": "f.jsonl:3",
        "fields": {"id": 7},
    }


def test_plain_strings_count_as_one_turn():
    record, kind = row_to_record({"src": "What is 2+2?", "tgt": "4"}, "f:1")
    assert (record["messages"], record["label"], kind) == (
        [{"role": "user", "content": "What is 2+2?"}],
        "4",
        "src/tgt with reference",
    )
    record, _ = row_to_record({"src": "Hello"}, "f:2")
    assert record["messages"] == [{"role": "user", "content": "Hello"}] and record["label"] is None


TEMPLATED = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>"
)


@pytest.mark.parametrize("src", [TEMPLATED, [TEMPLATED]])
def test_templated_src_is_used_verbatim(src):
    record, kind = row_to_record({"src": src, "tgt": ["(1) Zoey is a knight"]}, "kk.jsonl:1")
    assert kind == "templated src"
    assert record["prompt"] == TEMPLATED and "messages" not in record
    assert record["label"] == "(1) Zoey is a knight"
    assert render_prompt(record, TOK) == TEMPLATED


@pytest.mark.parametrize(
    "text",
    [
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "<s>[INST] Hi [/INST]",
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
        "<｜User｜>Hi<｜Assistant｜>",
    ],
)
def test_template_markers(text):
    assert is_templated(text)
    assert not is_templated("Hi [<search-res>] <answer>x</answer> User: hello")


def test_messages_rows_keep_system_and_use_a_final_assistant_turn_as_label():
    row = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
        ],
        "extra_info": {"split": "train"},
    }
    record, kind = row_to_record(row, "m.jsonl:1")
    assert kind == "messages"
    assert record["messages"] == row["messages"][:2] and record["label"] == "4"
    assert record["fields"] == {"extra_info": {"split": "train"}}
    assert render_prompt(record, TOK) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_verl_rows():
    row = {
        "data_source": "countdown",
        "prompt": [{"role": "user", "content": "Make 16 from [3, 5, 2]."}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": {"target": 16, "numbers": [3, 5, 2]}},
        "extra_info": {"index": 4},
    }
    record, kind = row_to_record(row, "v.parquet#5")
    assert kind == "chat prompt (verl)"
    assert record["messages"] == row["prompt"]
    assert record["label"] == '{"target": 16, "numbers": [3, 5, 2]}'
    assert record["task"] == "countdown"  # data_source names a built-in task
    assert record["fields"] == {k: row[k] for k in ("data_source", "ability", "reward_model", "extra_info")}
    gsm, _ = row_to_record(
        {**row, "data_source": "openai/gsm8k", "reward_model": {"ground_truth": "72"}}, "v#1"
    )
    assert gsm["task"] == "gsm8k" and gsm["label"] == "72"  # verl's data_source -> its default scorer
    other, _ = row_to_record({**row, "data_source": "my/own_set", "reward_model": {"ground_truth": "72"}}, "v#2")
    assert other["task"] is None and other["label"] == "72"


def test_plain_prompt_is_verbatim_and_takes_a_label_field():
    record, kind = row_to_record({"prompt": "Q: 2+2\nA:", "label": 4, "data_source": "toy"}, "p.jsonl:1")
    assert kind == "prompt"
    assert record == {
        "prompt": "Q: 2+2\nA:",
        "label": "4",
        "task": None,
        "source": "p.jsonl:1",
        "fields": {"data_source": "toy"},
    }
    record, _ = row_to_record({"prompt": "Q", "tgt": ["A"]}, "p.jsonl:2")
    assert record["label"] == "A" and record["fields"] == {}


def test_prompt_and_response_keys_rename_the_fields():
    record, _ = row_to_record(
        {"question": ["Hi"], "answer": ["Hello"], "src": "kept"}, "r:1", "question", "answer"
    )
    assert record["messages"] == [{"role": "user", "content": "Hi"}] and record["label"] == "Hello"
    assert record["fields"] == {"src": "kept"}


def test_mismatched_turns_name_file_line_and_field(write_jsonl):
    rows = [{"src": ["q"], "tgt": ["a"]}] * 16 + [{"src": ["a", "b"], "tgt": ["1", "2", "3"]}]
    path = write_jsonl(rows)
    with pytest.raises(DataError) as err:
        load_datasets(path)
    assert str(err.value) == f"{path}:17: 'tgt' has 3 turns but 'src' has 2; expected 1 or 2"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"src": ["Hi", 3], "tgt": ["x"]}, "f:1: 'src'[1] is a int; expected a string"),
        ({"src": {"a": 1}}, "f:1: 'src' is a dict; expected a string or a list of strings"),
        ({"src": [], "tgt": []}, "f:1: 'src' is empty; expected at least one non-empty user turn"),
        ({"src": None}, "f:1: 'src' is missing or null; expected a string or a list of strings"),
        ({"src": "Hi", "tgt": [1]}, "f:1: 'tgt'[0] is a int; expected a string"),
        (
            {"text": "Hi", "id": 1},
            "f:1: no prompt found; expected 'src' (src/tgt), 'messages' or 'prompt' (the row has keys: id, text)",
        ),
        ({"messages": []}, "f:1: 'messages' must be a non-empty list"),
        (
            {"messages": [{"content": "Hi"}]},
            "f:1: 'messages'[0] must be an object with a string 'role' and a 'content'",
        ),
        (
            {"messages": [{"role": "assistant", "content": "Hi"}]},
            "f:1: 'messages' holds only an assistant turn",
        ),
        ({"prompt": "  "}, "f:1: 'prompt' is empty"),
    ],
)
def test_bad_rows(row, message):
    with pytest.raises(DataError) as err:
        row_to_record(row, "f:1")
    assert str(err.value).startswith(message)
