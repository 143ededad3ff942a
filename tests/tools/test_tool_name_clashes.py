"""Two definitions, one name (issue 47, class 6): the model calls a tool by its name, so a second tool of one name
is refused by one function (`declare`) wherever the two come from, with both places named; a comma between tool
files (reward_functions' separator) is refused with the ';' that tools uses."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.tools import load_function_tools, load_tool_config, load_tools
from ppokit.tools.declare import ToolError

REPO = Path(__file__).resolve().parents[2]
ADD = 'def add(a: int, b: int) -> int:\n    """Add."""\n    return a + {k}\n\n' \
      'def mul(a: int, b: int) -> int:\n    """Multiply."""\n    return a * b\n\n' \
      'def multiply(a: int, b: int) -> int:\n    """Multiply too."""\n    return a * b\n'
YAML_ENTRY = """
  - class_name: verl_like_tool.CounterTool
    config: {{scale: 2}}
    tool_schema:
      type: function
      function: {{name: {name}, description: count, parameters: {{type: object, properties: {{}}}}}}
"""


def tool_files(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(ADD.format(k="b"))
    b.write_text(ADD.format(k="b + 1"))
    return a, b


def yaml_file(tmp_path, *names):
    path = tmp_path / f"tools_{'_'.join(names)}.yaml"
    path.write_text("tools:" + "".join(YAML_ENTRY.format(name=n) for n in names))
    return str(path)


def test_every_clash_is_refused_the_same_way_naming_both_places(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # verl_like_tool
    a, b = tool_files(tmp_path)
    clashes = {
        "two files": (f"{a}:add;{b}:add", None, [f"tools '{a}:add'", f"tools '{b}:add'"]),
        "one file twice": (f"{a}:add,add", None, [f"tools '{a}:add,add'"]),
        "a file and the bundled tool": (f"{a}:multiply;multiply", None, ["'multiply'"]),
        "tools and tool_config_path": (f"{a}:add", yaml_file(tmp_path, "add"), [f"tools '{a}:add'", "tools_add.yaml: tools[0]"]),
        "two YAML entries": (None, yaml_file(tmp_path, "counter", "counter"), ["tools[0]", "tools[1]"]),
    }
    for what, (tools, config, places) in clashes.items():
        with pytest.raises(ToolError) as caught:
            load_tools(tools, config)
        message = str(caught.value)
        name = "multiply" if "bundled" in what else "counter" if "YAML" in what else "add"
        assert message.startswith(f"tool {name!r} is declared twice: in "), (what, message)
        assert "rename one, or declare it once" in message and all(p in message for p in places), (what, message)
    with pytest.raises(ToolError, match="declared twice"):
        load_tool_config(yaml_file(tmp_path, "counter", "counter"))
    assert list(load_tools(f"{a}:add;{b}:mul", None)) == ["add", "mul"]  # distinct names from two files load


def test_a_comma_between_tool_files_names_the_semicolon(tmp_path):
    a, b = tool_files(tmp_path)
    for spec, fixed in ((f"{a}:add,{b}:mul", f"{a}:add;{b}:mul"), (f"{a}:add,{b}", f"{a}:add;{b}"),
                        (f"{a}:add,mul,{b}:mul", f"{a}:add,mul;{b}:mul")):
        with pytest.raises(ToolError) as caught:
            load_function_tools(spec)
        message = str(caught.value)
        assert "separate tool files with ';'" in message and repr(fixed) in message, message
    assert list(load_function_tools(f"{a}:add,mul")) == ["add", "mul"]  # the comma between functions stays


def test_run_ppo_refuses_two_tools_of_one_name_with_a_sentence(tiny_model_dir, tmp_path):
    a, b = tool_files(tmp_path)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"add {i} and 2", "label": str(i + 2)}) + "\n" for i in range(4)))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(dict(
        actor_model_name_or_path=tiny_model_dir, train_datasets=str(data), rl_algorithm="grpo", task="arithmetic",
        global_batch_size=2, rollout_n=2, global_mini_batch_size=2, max_dec_len=8, max_prompt_len=32, max_length=64,
        max_steps=1, output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), save_strategy="no",
        disable_tqdm=True, multi_turn=True)))
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    for tools, expected in ((f"{a}:add;{b}:add", "error: tool 'add' is declared twice"),
                            (f"{a}:add,{b}:mul", "separate tool files with ';'")):
        done = subprocess.run([sys.executable, str(REPO / "run_ppo.py"), str(config), "--tools", tools], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and expected in done.stderr, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        assert not (tmp_path / "out" / "metrics.jsonl").exists()  # nothing trained
