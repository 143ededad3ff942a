"""Running the tool calls of a batch's rows: per-call timeout, at most `max_parallel_calls` per turn, errors as text.

Nothing a tool does ends the run: an unknown tool, bad arguments, an exception or a timeout become the text the
model reads next (``Error: ...``), counted in `CallResult.error` / `.timeout`. Calls run concurrently on one event
loop (`ToolRuntime`, kept for the whole rollout so verl tool instances live across turns); plain functions run in
worker threads, so a timed-out function may finish in the background (its result is dropped).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from dataclasses import dataclass, field

from .declare import Tool
from .parse import ToolCall


@dataclass
class CallResult:
    """What one call gave back: the text for the model, whether it failed or timed out, its step reward."""

    name: str
    arguments: dict
    text: str
    error: bool = False
    timeout: bool = False
    reward: float = 0.0


@dataclass
class ToolRuntime:
    """The tools of one rollout with their per-row verl instances (row -> tool name -> instance id)."""

    tools: dict[str, Tool]
    timeout: float = 10.0
    max_parallel_calls: int = 1
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    threads: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="ppokit-tool"))
    instances: dict[int, dict[str, object]] = field(default_factory=dict)

    def __post_init__(self):
        # The loop runs in its own thread, so tools run the same under Jupyter (whose main thread already runs a
        # loop, where run_until_complete is refused) as in a script.
        self._thread = threading.Thread(target=self.loop.run_forever, name="ppokit-tools", daemon=True)
        self._thread.start()

    def run(self, coroutine):
        """Run `coroutine` on the tools' loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> dict[int, float]:
        """Release every instance (verl's calc_reward first: its value is each row's final tool reward)."""
        try:
            return self.run(self._release_all())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
            self.loop.close()
            self.threads.shutdown(wait=False, cancel_futures=True)

    async def _release_all(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for row, per_tool in self.instances.items():
            for name, instance in per_tool.items():
                impl = self.tools[name].impl
                try:
                    value = await asyncio.wait_for(impl.calc_reward(instance), self.timeout)
                    out[row] = out.get(row, 0.0) + float(value or 0.0)
                except Exception:  # a reward the tool cannot give is no reward, never a crash
                    pass
                try:
                    await asyncio.wait_for(impl.release(instance), self.timeout)
                except Exception:
                    pass
        return out


def run_calls(runtime: ToolRuntime, calls: dict[int, list[ToolCall]],
              create_kwargs: dict[int, dict] | None = None) -> dict[int, list[CallResult]]:
    """Run the calls of every row (row -> its turn's calls, in order) and return row -> results, same order.
    create_kwargs: row -> {tool name: kwargs of verl's create} (verl's extra_info.tools_kwargs.<tool>.create_kwargs)."""
    async def all_rows():
        rows = list(calls)
        done = await asyncio.gather(*[_row(runtime, r, calls[r], (create_kwargs or {}).get(r, {})) for r in rows])
        return dict(zip(rows, done))

    return runtime.run(all_rows())


async def _row(runtime: ToolRuntime, row: int, calls: list[ToolCall], kwargs: dict) -> list[CallResult]:
    run = calls[: runtime.max_parallel_calls]
    results = await asyncio.gather(*[_one(runtime, row, c, kwargs) for c in run])
    for c in calls[runtime.max_parallel_calls:]:
        results.append(CallResult(c.name, c.arguments, f"Error: only {runtime.max_parallel_calls} tool call(s) per "
                                  "turn are run; this one was not.", error=True))
    return list(results)


async def _instance(runtime: ToolRuntime, row: int, tool: Tool, kwargs: dict):
    per_row = runtime.instances.setdefault(row, {})
    if tool.name not in per_row:
        created = await tool.impl.create(**((kwargs.get(tool.name) or {}).get("create_kwargs") or {}))
        per_row[tool.name] = created[0] if isinstance(created, tuple) else created  # verl >= 0.5: (id, response)
    return per_row[tool.name]


async def _one(runtime: ToolRuntime, row: int, call: ToolCall, kwargs: dict) -> CallResult:
    if call.error:
        return CallResult(call.name, call.arguments, f"Error: {call.error}", error=True)
    tool = runtime.tools.get(call.name)
    if tool is None:
        return CallResult(call.name, call.arguments, f"Error: there is no tool named {call.name!r}; the tools are "
                          f"{', '.join(sorted(runtime.tools))}.", error=True)
    try:
        if tool.sync:
            pending = runtime.loop.run_in_executor(runtime.threads, tool.impl.execute_sync, call.arguments)
        else:
            pending = tool.impl.execute(await _instance(runtime, row, tool, kwargs), call.arguments)
        text, reward, _ = await asyncio.wait_for(pending, runtime.timeout)
    except asyncio.TimeoutError:
        return CallResult(call.name, call.arguments, f"Error: the tool {call.name!r} did not answer within "
                          f"{runtime.timeout:g} s.", error=True, timeout=True)
    except Exception as exc:  # the model reads what went wrong and may try again
        return CallResult(call.name, call.arguments, f"Error: {type(exc).__name__}: {exc}", error=True)
    text = getattr(text, "text", text)  # verl >= 0.5 returns a ToolResponse
    return CallResult(call.name, call.arguments, text if isinstance(text, str) else json.dumps(text),
                      reward=float(reward or 0.0))
