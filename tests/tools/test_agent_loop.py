"""The agent loop on a scripted engine: masks, token-in/token-out, tool errors, timeouts, truncation, budgets."""

import time

import pytest
from scripted import ScriptedEngine

from ppokit.rollout.agent_loop import AgentSpec, agent_generate, tool_metrics, tool_turn_text
from ppokit.rollout.base import SamplingParams
from ppokit.testing import tiny_tokenizer
from ppokit.tools import function_tool


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b


def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError("disk on fire")


def slow(x: int) -> int:
    """Takes too long."""
    time.sleep(1.5)
    return x


def long_text(n: int) -> str:
    """A long answer."""
    return "z" * n


TOOLS = {t.name: t for t in map(function_tool, [multiply, broken, slow, long_text])}
CALL = '<tool_call>{{"name": "{}", "arguments": {}}}</tool_call>'


def run(scripts, max_new_tokens=400, n=1, **spec):
    tok = tiny_tokenizer()
    prompts = [tok.encode(f"question {i}?", add_special_tokens=False) for i in range(len(scripts))]
    engine = ScriptedEngine(tok, prompts, scripts, logprob=-0.5)
    out = agent_generate(engine, tok, prompts, SamplingParams(n=n, max_new_tokens=max_new_tokens),
                         AgentSpec(tools=TOOLS, **spec))
    return tok, prompts, engine, out


def test_model_tokens_are_kept_exactly_and_tool_results_are_masked():
    first = "Let me compute. " + CALL.format("multiply", '{"a": 3, "b": 4}')
    scripts = [[first + " <tool_response>99</tool_response> invented", "It is 12.<EOS>"], ["No tool: 7.<EOS>"]]
    tok, prompts, engine, out = run(scripts)
    ids, mask = out.response_ids[0], out.loss_mask[0]
    model1 = tok.encode(first, add_special_tokens=False)  # cut right after </tool_call>: the invention is dropped
    tool = tok.encode(tool_turn_text(tok, ["12"], AgentSpec(tools=TOOLS)), add_special_tokens=False)
    model2 = tok.encode("It is 12.", add_special_tokens=False) + [tok.eos_token_id]
    assert ids == model1 + tool + model2  # token-in/token-out: the model's tokens as sampled, tool turn appended
    assert mask == [1] * len(model1) + [0] * len(tool) + [1] * len(model2)
    assert "<tool_response>\n12\n</tool_response>" in tok.decode(tool)
    assert out.logprobs[0] == [-0.5] * len(model1) + [0.0] * len(tool) + [-0.5] * len(model2)
    # the second model turn continued from prompt + everything so far
    assert engine.contexts[2] == prompts[0] + model1 + tool
    assert out.finish_reasons == ["stop", "stop"]
    assert out.loss_mask[1] == [1] * len(out.response_ids[1])  # a row without calls is a single turn
    assert [t["role"] for t in out.turns[0]] == ["assistant", "tool", "assistant"]
    assert out.turns[0][0]["calls"][0]["text"] == "12" and not out.turns[0][0]["calls"][0]["error"]
    m = tool_metrics(out.turns)
    assert m["tools/calls_per_sample"] == 0.5 and m["turns/mean"] == 1.5 and m["tools/errors"] == 0.0
    assert m["tools/response_tokens_per_sample"] == len(tool) / 2


def test_errors_and_timeouts_go_back_to_the_model_as_text_and_are_counted():
    scripts = [[CALL.format("nope", "{}"), "ok<EOS>"], [CALL.format("broken", '{"x": 1}'), "ok<EOS>"],
               ["<tool_call>{not json}</tool_call>", "ok<EOS>"], [CALL.format("slow", '{"x": 1}'), "ok<EOS>"],
               [CALL.format("multiply", '{"a": "x"}'), "ok<EOS>"]]
    tok, _, _, out = run(scripts, tool_timeout=0.2)
    texts = [row[1]["text"] for row in out.turns]
    assert "there is no tool named 'nope'" in texts[0]
    assert "RuntimeError: disk on fire" in texts[1]
    assert "not valid JSON" in texts[2]
    assert "did not answer within 0.2 s" in texts[3]
    assert "TypeError" in texts[4]  # a missing argument: the function's own error
    m = tool_metrics(out.turns)
    assert m["tools/errors"] == 1.0 and m["tools/timeouts"] == 0.2
    assert out.finish_reasons == ["stop"] * 5  # every row went on after its error


def test_tool_results_are_truncated_and_the_budget_ends_rows():
    scripts = [[CALL.format("long_text", '{"n": 50}'), "done<EOS>"]]
    _, _, _, out = run(scripts, max_tool_response_length=5)
    assert "zzzzz...(truncated)" in out.turns[0][1]["text"] and "z" * 6 not in out.turns[0][1]["text"]
    # a budget that ends inside the tool turn: cut there, "length", no third turn
    call_tokens = len(tiny_tokenizer().encode(scripts[0][0]))
    _, _, engine, out = run(scripts, max_new_tokens=call_tokens + 10)
    assert len(out.response_ids[0]) == call_tokens + 10 and out.finish_reasons == ["length"]
    assert out.loss_mask[0] == [1] * call_tokens + [0] * 10 and len(engine.contexts) == 1


def test_max_assistant_turns_and_max_parallel_calls():
    two = CALL.format("multiply", '{"a": 2, "b": 3}') + "\n" + CALL.format("multiply", '{"a": 4, "b": 5}')
    _, _, engine, out = run([[two, "ok<EOS>"]], max_assistant_turns=1)
    assert out.finish_reasons == ["turns"] and len(out.turns[0]) == 1 and len(engine.contexts) == 1
    _, _, _, out = run([[two, "ok<EOS>"]], max_parallel_calls=1)
    results = out.turns[0][0]["calls"]
    assert results[0]["text"] == "6" and results[1]["error"] and "only 1 tool call" in results[1]["text"]
    _, _, _, out = run([[two, "ok<EOS>"]], max_parallel_calls=2)
    assert [c["text"] for c in out.turns[0][0]["calls"]] == ["6", "20"]


def test_rows_advance_together_and_finished_rows_drop_out():
    # the engine counts turns per prompt, so prompt 0's two rows take two script entries per round
    scripts = [[CALL.format("multiply", '{"a": 1, "b": 1}')] * 4 + ["end<EOS>"], ["at once<EOS>"]]
    _, _, engine, out = run(scripts, n=2)
    # round 1: 4 rows; round 2: the 2 rows of prompt 0; round 3: the same 2
    assert len(engine.contexts) == 4 + 2 + 2
    assert out.prompt_index == [0, 0, 1, 1]
    assert [len([t for t in row if t["role"] == "assistant"]) for row in out.turns] == [3, 3, 1, 1]


@pytest.mark.parametrize("fmt,text", [("llama", '<|python_tag|>{"name": "multiply", "parameters": {"a": 6, "b": 7}}'),
                                      ("qwen", CALL.format("multiply", '{"a": 6, "b": 7}'))])
def test_other_formats(fmt, text):
    _, _, _, out = run([[text + " trailing", "ok<EOS>"]], tool_format=fmt)
    assert out.turns[0][0]["calls"][0]["text"] == "42"
    assert not out.turns[0][0]["text"].endswith("trailing")
