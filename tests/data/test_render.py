import logging

import pytest
from tokenizers import processors

import ppokit.data.render as render_mod
from ppokit.data import DataError, encode_prompts, render_prompt, row_to_record
from ppokit.testing import tiny_tokenizer

CONVERSATION, _ = row_to_record({"src": ["Hi", "Tell me a joke"], "tgt": ["Hello!"]}, "c.jsonl:1")


def test_plain_rendering_without_a_chat_template_warns_once(caplog, monkeypatch):
    monkeypatch.setattr(render_mod, "_warned_plain", False)
    tok = tiny_tokenizer(chat_template=False)
    system, _ = row_to_record(
        {"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}]}, "m:1"
    )
    with caplog.at_level(logging.WARNING, logger="ppokit.data"):
        assert (
            render_prompt(CONVERSATION, tok)
            == "User: Hi\nAssistant: Hello!\nUser: Tell me a joke\nAssistant:"
        )
        assert render_prompt(system, tok) == "System: Be kind.\nUser: Hi\nAssistant:"
        assert render_prompt(system, None) == "System: Be kind.\nUser: Hi\nAssistant:"
    warnings = [r for r in caplog.records if "has no chat template" in r.getMessage()]
    assert len(warnings) == 1


def test_verbatim_prompts_ignore_the_template():
    record, _ = row_to_record({"prompt": "raw text"}, "p:1")
    assert render_prompt(record, tiny_tokenizer()) == "raw text"
    assert render_prompt(record, tiny_tokenizer(chat_template=False)) == "raw text"


def test_a_failing_template_names_the_record():
    tok = tiny_tokenizer()
    tok.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(
        DataError,
        match="c.jsonl:1: the tokenizer's chat template failed on this record: roles must alternate",
    ):
        render_prompt(CONVERSATION, tok)


def _records(*texts):
    return [row_to_record({"prompt": t}, f"p:{i + 1}")[0] for i, t in enumerate(texts)]


def test_encode_prompts_drops_and_counts_long_prompts(caplog):
    tok = tiny_tokenizer()  # byte-level: one token per byte
    records = _records("abc", "abcdefgh", "xy", "0123456789")
    with caplog.at_level(logging.WARNING, logger="ppokit.data"):
        kept, ids, dropped = encode_prompts(records, tok, max_prompt_len=5)
    assert [r["source"] for r in kept] == ["p:1", "p:3"]
    assert ids == [
        tok("abc", add_special_tokens=False)["input_ids"],
        tok("xy", add_special_tokens=False)["input_ids"],
    ]
    assert [len(x) for x in ids] == [3, 2] and dropped == 2
    assert (
        "dropped 2 of 4 prompts longer than max_prompt_len=5 tokens (longest: 10 tokens), e.g. p:2"
        in caplog.text
    )


def test_encode_prompts_uses_the_chat_template_without_extra_specials():
    tok = tiny_tokenizer()
    _, [ids], dropped = encode_prompts([CONVERSATION], tok, max_prompt_len=None)
    assert dropped == 0
    assert tok.decode(ids) == render_prompt(CONVERSATION, tok)
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")


def test_all_prompts_too_long_or_none_is_an_error():
    with pytest.raises(
        DataError, match=r"all 2 prompts are longer than max_prompt_len=2 tokens \(the shortest has 3\)"
    ):
        encode_prompts(_records("abc", "abcd"), tiny_tokenizer(), 2)
    with pytest.raises(DataError, match="there are no prompts to encode"):
        encode_prompts([], tiny_tokenizer(), 10)


def test_bos_is_added_once_for_tokenizers_that_add_one():
    tok = tiny_tokenizer()
    tok.bos_token = "<|endoftext|>"
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)]
    )
    _, ids, _ = encode_prompts(_records("ab", "<|endoftext|>ab"), tok, None)
    assert ids == [[0, *tok("ab", add_special_tokens=False)["input_ids"]]] * 2
