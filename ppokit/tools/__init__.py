"""Tools a model can call during a multi-turn rollout: declarations, call parsing and execution.

    tools = load_tools(args.tools, args.tool_config_path)   # {name: Tool}
    calls = parse_calls(text, "hermes")                     # [ToolCall(name, arguments, error)]
    results = run_calls(tools, rows_of_calls, ...)          # [[CallResult(text, error, timeout, reward)]]

Two ways to declare a tool: a Python function with type hints and a docstring (the OpenAI function
schema is derived from its signature), or verl's tool config YAML (a class with verl's async
``create/execute/calc_reward/release`` and its ``tool_schema``). Both become a `Tool`.
"""

from .declare import Tool, function_tool, load_function_tools, load_tool_config, load_tools
from .execute import CallResult, run_calls
from .parse import TOOL_FORMATS, ToolCall, call_end, parse_calls

__all__ = ["Tool", "function_tool", "load_function_tools", "load_tool_config", "load_tools", "CallResult",
           "run_calls", "TOOL_FORMATS", "ToolCall", "call_end", "parse_calls"]
