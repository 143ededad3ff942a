"""Tool declarations: schemas from Python signatures, verl's tool config YAML, and what is refused."""

import pytest
from scripted import ScriptedEngine

from ppokit.data.verl_rows import row_is_multi_turn, tools_kwargs_of
from ppokit.rollout.agent_loop import AgentSpec, agent_generate
from ppokit.rollout.base import SamplingParams
from ppokit.testing import tiny_tokenizer
from ppokit.tools import function_tool, load_function_tools, load_tool_config, load_tools
from ppokit.tools.declare import ToolError


def search(query: str, limit: int = 3, exact: bool | None = None) -> str:
    """Search the notes.

    Args:
        query: words to look for
        limit (int): how many hits
    """
    return query


def test_schema_comes_from_the_signature_and_docstring():
    schema = function_tool(search).schema
    assert schema == {"type": "function", "function": {
        "name": "search", "description": "Search the notes.",
        "parameters": {"type": "object", "required": ["query"], "properties": {
            "query": {"type": "string", "description": "words to look for"},
            "limit": {"type": "integer", "description": "how many hits"},
            "exact": {"type": "boolean"}}}}}


def test_function_tools_from_a_file_and_bundled_names(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text('def add(a: int, b: int) -> int:\n    """Add."""\n    return a + b\n\n'
                    'def bad(a):\n    """No hint."""\n')
    tools = load_function_tools(f"{path}:add")
    assert list(tools) == ["add"] and tools["add"].impl.execute_sync({"a": 2, "b": 3})[0] == "5"
    assert list(load_function_tools("multiply")) == ["multiply"]
    with pytest.raises(ToolError, match="needs a type hint"):
        load_function_tools(f"{path}:bad")
    with pytest.raises(ToolError, match="has no function 'nope'"):
        load_function_tools(f"{path}:nope")
    with pytest.raises(ToolError, match="not found"):
        load_function_tools("missing.py:add")
    with pytest.raises(ToolError, match="no tool is declared"):
        load_tools(None, None)


def write_yaml(tmp_path, body=None):
    path = tmp_path / "tools.yaml"
    path.write_text(body or """
tools:
  - class_name: verl_like_tool.CounterTool
    config: {scale: 2, type: native}
    tool_schema:
      type: function
      function:
        name: counter
        description: add x (times the scale) to the counter
        parameters: {type: object, properties: {x: {type: integer}}, required: [x]}
""")
    return str(path)


def test_verl_tool_config_yaml_runs_with_create_kwargs_step_and_final_rewards(tmp_path):
    tools = load_tool_config(write_yaml(tmp_path))
    impl = tools["counter"].impl
    assert impl.config["scale"] == 2 and tools["counter"].schema["function"]["name"] == "counter"
    tok = tiny_tokenizer()
    prompts = [tok.encode("q?", add_special_tokens=False)]
    call = '<tool_call>{"name": "counter", "arguments": {"x": 3}}</tool_call>'
    engine = ScriptedEngine(tok, prompts, [[call, call, "done<EOS>"]])
    out = agent_generate(engine, tok, prompts, SamplingParams(max_new_tokens=400), AgentSpec(tools=tools),
                         tools_kwargs=[{"counter": {"create_kwargs": {"start": 5}}}])
    results = [c for t in out.turns[0] if t["role"] == "assistant" for c in t.get("calls", [])]
    assert [c["text"] for c in results] == ["counter=11", "counter=17"]  # 5 + 2*3, then + 2*3
    assert [c["reward"] for c in results] == [0.5, 0.5]
    assert out.turns[0][-1]["tool_reward"] == 1.0  # calc_reward: counter >= 10
    assert len(impl.released) == 1  # one instance per trajectory, released at its end


def test_bad_yaml_is_refused_with_a_sentence(tmp_path):
    with pytest.raises(ToolError, match="top-level 'tools:' list"):
        load_tool_config(write_yaml(tmp_path, "other: 1\n"))
    with pytest.raises(ToolError, match="cannot import"):
        load_tool_config(write_yaml(tmp_path, "tools:\n  - class_name: nowhere.Tool\n    tool_schema: "
                                              "{function: {name: t}}\n"))


def test_verl_rows_choose_multi_turn_by_agent_name():
    verl = {"source": "x.parquet:1", "fields": {"data_source": "openai/gsm8k", "agent_name": "tool_agent",
                                                 "extra_info": {"tools_kwargs": {"calc": {"create_kwargs": {"a": 1}}}}}}
    assert row_is_multi_turn(verl) and tools_kwargs_of(verl) == {"calc": {"create_kwargs": {"a": 1}}}
    plain_verl = {"fields": {"data_source": "openai/gsm8k", "extra_info": {}}}
    assert not row_is_multi_turn(plain_verl) and tools_kwargs_of(plain_verl) == {}
    assert row_is_multi_turn({"fields": {"task": "multiply"}})
    assert not row_is_multi_turn({"fields": {"agent_name": "single_turn_agent"}})
    with pytest.raises(ValueError, match="tools_kwargs must map"):
        tools_kwargs_of({"fields": {"extra_info": {"tools_kwargs": {"calc": 3}}}})
