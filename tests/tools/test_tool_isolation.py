"""Tools run isolated from the trainer: an exit or interrupt inside a tool is an error text, a hanging tool cannot
keep a script alive, and SIGTERM / Ctrl-C stop a rollout that waits on tools."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from scripted import ScriptedEngine

from ppokit.rollout.agent_loop import AgentSpec, agent_generate, tool_metrics
from ppokit.rollout.base import SamplingParams
from ppokit.testing import tiny_tokenizer
from ppokit.tools import Tool, function_tool

CALL = '<tool_call>{{"name": "{}", "arguments": {}}}</tool_call>'
HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def exits(x: int) -> int:
    """Calls sys.exit."""
    sys.exit(3)


def interrupts(x: int) -> int:
    """Raises KeyboardInterrupt."""
    raise KeyboardInterrupt


class ExitingVerlTool:
    """A verl-style tool whose execute raises SystemExit on the tools' event loop itself."""

    async def create(self, instance_id=None, **kwargs):
        return "id"

    async def execute(self, instance_id, parameters, **kwargs):
        raise SystemExit(4)

    async def calc_reward(self, instance_id, **kwargs):
        raise KeyboardInterrupt

    async def release(self, instance_id, **kwargs):
        raise SystemExit(5)


def _generate(scripts, tools, **spec):
    tok = tiny_tokenizer()
    prompts = [tok.encode(f"question {i}?", add_special_tokens=False) for i in range(len(scripts))]
    engine = ScriptedEngine(tok, prompts, scripts)
    return agent_generate(engine, tok, prompts, SamplingParams(n=1, max_new_tokens=400), AgentSpec(tools=tools, **spec))


def test_exit_and_interrupt_inside_a_tool_become_error_texts_and_are_counted():
    schema = {"type": "function", "function": {"name": "verl_exit", "description": "exits", "parameters": {}}}
    tools = {t.name: t for t in map(function_tool, [exits, interrupts])}
    tools["verl_exit"] = Tool("verl_exit", schema, ExitingVerlTool())
    scripts = [[CALL.format(name, '{"x": 1}'), "ok<EOS>"] for name in ("exits", "interrupts", "verl_exit")]
    out = _generate(scripts, tools, tool_timeout=5)
    texts = [row[1]["text"] for row in out.turns]
    assert "tried to exit the process (SystemExit 3)" in texts[0]
    assert "Error: KeyboardInterrupt" in texts[1]
    assert "tried to exit the process (SystemExit 4)" in texts[2]
    assert out.finish_reasons == ["stop"] * 3  # every row went on to its next turn
    assert tool_metrics(out.turns)["tools/errors"] == 1.0
    assert "tool_reward" not in out.turns[2][-1] or out.turns[2][-1]["tool_reward"] == 0.0


def test_tools_run_when_the_callers_thread_runs_an_event_loop():
    """Jupyter's main thread runs a loop: tools still run, and the rollout's cleanup does not touch that loop."""
    import asyncio

    async def inside_a_loop():
        return _generate([[CALL.format("exits", '{"x": 1}'), "ok<EOS>"]], {"exits": function_tool(exits)})

    out = asyncio.run(inside_a_loop())
    assert "SystemExit 3" in out.turns[0][1]["text"] and out.finish_reasons == ["stop"]


RELEASE = threading.Event()


def waits(x: int) -> int:
    """Waits until the test lets it go."""
    RELEASE.wait()
    return x


def test_a_hanging_tool_is_a_timeout_and_leaves_only_daemon_threads():
    before = set(threading.enumerate())
    try:
        out = _generate([[CALL.format("waits", '{"x": 1}'), "ok<EOS>"]], {"waits": function_tool(waits)},
                        tool_timeout=0.2)
        assert "did not answer within 0.2 s" in out.turns[0][1]["text"] and out.finish_reasons == ["stop"]
        assert tool_metrics(out.turns)["tools/timeouts"] == 1.0
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        assert left and all(t.daemon for t in left)  # the abandoned call: a daemon, it cannot hold the exit
        assert not any(t.name == "ppokit-tools" for t in left)  # the loop's thread ended with the rollout
    finally:
        RELEASE.set()


SCRIPT = """
import asyncio, sys, threading, time
sys.path.insert(0, {here!r})
from scripted import ScriptedEngine
from ppokit.rollout.agent_loop import AgentSpec, agent_generate
from ppokit.rollout.base import SamplingParams
from ppokit.testing import tiny_tokenizer
from ppokit.tools import Tool, function_tool

def hangs(x: int) -> int:
    \"\"\"Never returns.\"\"\"
    open({marker!r}, "w").close()
    threading.Event().wait()

class BlocksTheLoop:
    async def create(self, instance_id=None, **kw): return "id"
    async def execute(self, instance_id, parameters, **kw):
        time.sleep(3600)  # blocking code inside an async tool
    async def calc_reward(self, instance_id, **kw): return 0.0
    async def release(self, instance_id, **kw): return None

tools = {{"hangs": function_tool(hangs)}}
tools["blocks"] = Tool("blocks", {{"type": "function", "function": {{"name": "blocks"}}}}, BlocksTheLoop())
tok = tiny_tokenizer()
call = '<tool_call>{{"name": "{name}", "arguments": {{"x": 1}}}}</tool_call>'
prompts = [tok.encode("q?", add_special_tokens=False)]
engine = ScriptedEngine(tok, prompts, [[call, "ok<EOS>"]])
{setup}
out = agent_generate(engine, tok, prompts, SamplingParams(n=1, max_new_tokens=300),
                     AgentSpec(tools=tools, tool_timeout={timeout}))
print("TEXT:", out.turns[0][1]["text"].replace("\\n", " "), out.finish_reasons, flush=True)
"""


def _script(tmp_path, name, timeout, setup=""):
    marker = tmp_path / "started"
    path = tmp_path / "run.py"
    path.write_text(SCRIPT.format(here=str(HERE), marker=str(marker), name=name, timeout=timeout, setup=setup))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return path, marker, env


@pytest.mark.slow  # two Python processes that import torch
def test_a_tool_that_never_returns_is_a_timeout_and_the_script_exits(tmp_path):
    for name in ("hangs", "blocks"):
        path, _, env = _script(tmp_path, name, 0.3)
        done = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "did not answer within 0.3 s" in done.stdout and "['stop']" in done.stdout
        assert "never retrieved" not in done.stderr and "Traceback" not in done.stderr


def _wait_for(marker: Path, proc) -> None:
    for _ in range(600):
        if marker.exists() or proc.poll() is not None:
            return
        time.sleep(0.1)


@pytest.mark.slow  # two Python processes that import torch
def test_ctrl_c_and_sigterm_stop_a_rollout_that_waits_on_tools(tmp_path):
    path, marker, env = _script(tmp_path, "hangs", 600)
    proc = subprocess.Popen([sys.executable, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err
    assert "never retrieved" not in err

    marker.unlink()
    setup = ("from ppokit.checkpoint.run import Preemption, Preempted\n"
             "p = Preemption(); p.install()\n"
             "import atexit\n"
             "sys.excepthook = lambda t, e, tb: (print('STOPPED', t.__name__, flush=True), sys.exit(143))")
    path, marker, env = _script(tmp_path, "hangs", 600, setup=setup)
    proc = subprocess.Popen([sys.executable, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGTERM)  # the first: "finishing this step"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # the second stops at once (the tool sleeps 600 s)
    second = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert "STOPPED StoppedAtOnce" in out, err
    assert time.monotonic() - second < 30
    assert "never retrieved" not in err
