"""Running the tool calls of a batch's rows: per-call timeout, at most `max_parallel_calls` per turn, errors as text.

Nothing a tool does ends or hangs the run. An unknown tool, bad arguments, any exception — `SystemExit` and
`KeyboardInterrupt` raised inside a tool included — or a timeout become the text the model reads next
(``Error: ...``), counted in `CallResult.error` / `.timeout` (the tools/* metrics).

Isolation: calls run concurrently on one event loop (`ToolRuntime`, kept for the whole rollout so verl tool instances
live across turns) in a daemon thread of its own; every tool coroutine is wrapped so that no exception reaches the
loop (a `SystemExit` escaping a task would stop the loop and leave the trainer waiting forever). Plain functions run
in daemon threads, one per call: a function that never returns is abandoned at its timeout and cannot keep a finished
script alive. The trainer's thread waits in short slices, so SIGTERM and Ctrl-C reach it at once; an async tool that
blocks the loop itself (blocking code inside ``async def``) is abandoned with its loop after the turn's deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from dataclasses import dataclass, field

from .declare import Tool
from .parse import ToolCall

logger = logging.getLogger("ppokit")
_SLICE = 0.2  # seconds between the trainer thread's checks while it waits on the tools


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
class _Raised:
    """A tool's exception (any BaseException) carried as a value, so that it never unwinds the loop."""

    exc: BaseException

    def text(self) -> str:
        kind = type(self.exc).__name__
        if isinstance(self.exc, SystemExit):
            return f"Error: the tool tried to exit the process (SystemExit {self.exc.code!r}); it was stopped"
        return f"Error: {kind}: {self.exc}" if str(self.exc) else f"Error: {kind}"


async def _guarded(coroutine):
    """`coroutine`'s result, or a `_Raised` for whatever it raised (cancellation alone passes through)."""
    try:
        return await coroutine
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # SystemExit / KeyboardInterrupt from a tool must not reach the loop
        return _Raised(exc)


def _in_daemon_thread(loop: asyncio.AbstractEventLoop, fn, *args) -> asyncio.Future:
    """Run fn(*args) in a new daemon thread; the future gets its result or a `_Raised`."""
    future = loop.create_future()

    def settle(value) -> None:
        if not future.done():
            future.set_result(value)

    def work() -> None:
        try:
            value = fn(*args)
        except BaseException as exc:  # SystemExit in a tool ends nothing but this call
            value = _Raised(exc)
        try:
            loop.call_soon_threadsafe(settle, value)
        except RuntimeError:  # the loop is closed: the call was abandoned at its timeout
            pass

    threading.Thread(target=work, name="ppokit-tool-call", daemon=True).start()
    return future


@dataclass
class ToolRuntime:
    """The tools of one rollout with their per-row verl instances (row -> tool name -> instance id)."""

    tools: dict[str, Tool]
    timeout: float = 10.0
    max_parallel_calls: int = 1
    instances: dict[int, dict[str, object]] = field(default_factory=dict)

    def __post_init__(self):
        self._start_loop()

    def _start_loop(self) -> None:
        # The loop runs in its own thread, so tools run the same under Jupyter (whose main thread already runs a
        # loop, where run_until_complete is refused) as in a script; daemon, so a stuck tool never holds the exit.
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="ppokit-tools", daemon=True)
        self._thread.start()

    def run(self, coroutine, deadline: float | None = None):
        """Run `coroutine` on the tools' loop and return its result; raises TimeoutError past `deadline` seconds
        (the coroutine is cancelled). Waits in short slices so that signals reach the calling thread."""
        pending = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        end = None if deadline is None else time.monotonic() + deadline
        try:
            while True:
                try:
                    return pending.result(timeout=_SLICE)
                except concurrent.futures.TimeoutError:
                    if not self._thread.is_alive():
                        raise RuntimeError("the tools' event loop stopped") from None
                    if end is not None and time.monotonic() > end:
                        raise TimeoutError from None
        except BaseException:
            pending.cancel()  # Ctrl-C / SIGTERM / a deadline: nothing of this turn keeps running on the loop
            raise

    def abandon_loop(self) -> None:
        """Give up a loop that a tool blocks (blocking code in an async tool): its instances cannot be released;
        later turns run on a fresh loop."""
        logger.warning("a tool blocked the tools' event loop past its %g s timeout (blocking code inside an async "
                       "tool?); its calls were answered as timeouts and its loop was abandoned", self.timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.instances.clear()
        self._start_loop()

    def close(self, interrupted: bool = False) -> dict[int, float]:
        """Release every instance (verl's calc_reward first, unless interrupted: its value is each row's final tool
        reward), bounded by the timeout; then stop the loop. Never waits on a tool beyond its timeout."""
        out: dict[int, float] = {}
        try:
            if self.instances and self._thread.is_alive():
                out = self.run(self._release_all(not interrupted), deadline=2 * self.timeout + 1)
        except (TimeoutError, RuntimeError):
            logger.warning("releasing the tool instances took longer than %g s; they were left", self.timeout)
        finally:
            if self._thread.is_alive():
                try:  # on the loop's own thread: the caller's thread may run a loop of its own (Jupyter)
                    self.run(_cancel_others(), deadline=2.0)
                except (TimeoutError, RuntimeError):
                    pass
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join(timeout=1.0)
            if not self._thread.is_alive():
                self.loop.close()
        return out

    async def _release_all(self, rewards: bool) -> dict[int, float]:
        async def one(row: int, name: str, instance) -> tuple[int, float]:
            impl, value = self.tools[name].impl, 0.0
            if rewards:
                got = await _bounded(impl.calc_reward(instance), self.timeout)
                value = 0.0 if isinstance(got, _Raised) or got is None else float(got)  # no reward, never a crash
            await _bounded(impl.release(instance), self.timeout)
            return row, value

        done = await asyncio.gather(*[one(row, name, inst) for row, per_tool in self.instances.items()
                                      for name, inst in per_tool.items()])
        out: dict[int, float] = {}
        for row, value in done:
            out[row] = out.get(row, 0.0) + value
        return out


async def _cancel_others() -> None:
    """Cancel every other task of the running loop and let them see it, so none is destroyed pending."""
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=1.0)


async def _bounded(coroutine, timeout: float):
    """`_guarded(coroutine)` within `timeout` seconds (a `_Raised(TimeoutError)` past it)."""
    try:
        return await asyncio.wait_for(_guarded(coroutine), timeout)
    except asyncio.TimeoutError as exc:
        return _Raised(exc)


def run_calls(runtime: ToolRuntime, calls: dict[int, list[ToolCall]],
              create_kwargs: dict[int, dict] | None = None) -> dict[int, list[CallResult]]:
    """Run the calls of every row (row -> its turn's calls, in order) and return row -> results, same order.
    create_kwargs: row -> {tool name: kwargs of verl's create} (verl's extra_info.tools_kwargs.<tool>.create_kwargs).
    A turn whose loop a tool blocks ends after two timeouts (create, then execute) with every call a timeout."""
    async def all_rows():
        rows = list(calls)
        done = await asyncio.gather(*[_row(runtime, r, calls[r], (create_kwargs or {}).get(r, {})) for r in rows])
        return dict(zip(rows, done))

    try:
        return runtime.run(all_rows(), deadline=2 * runtime.timeout + 5)
    except (TimeoutError, RuntimeError):
        runtime.abandon_loop()
        return {r: [CallResult(c.name, c.arguments, _late(runtime, c.name), error=True, timeout=True) for c in cs]
                for r, cs in calls.items()}


def _late(runtime: ToolRuntime, name: str) -> str:
    return f"Error: the tool {name!r} did not answer within {runtime.timeout:g} s."


async def _row(runtime: ToolRuntime, row: int, calls: list[ToolCall], kwargs: dict) -> list[CallResult]:
    run = calls[: runtime.max_parallel_calls]
    results = await asyncio.gather(*[_one(runtime, row, c, kwargs) for c in run])
    for c in calls[runtime.max_parallel_calls:]:
        results.append(CallResult(c.name, c.arguments, f"Error: only {runtime.max_parallel_calls} tool call(s) per "
                                  "turn are run; this one was not.", error=True))
    return list(results)


async def _instance(runtime: ToolRuntime, row: int, tool: Tool, kwargs: dict):
    """verl's create, once per row and tool (a `_Raised` when create fails or times out)."""
    per_row = runtime.instances.setdefault(row, {})
    if tool.name not in per_row:
        created = await _bounded(tool.impl.create(**((kwargs.get(tool.name) or {}).get("create_kwargs") or {})),
                                 runtime.timeout)
        if isinstance(created, _Raised):
            return created
        per_row[tool.name] = created[0] if isinstance(created, tuple) else created  # verl >= 0.5: (id, response)
    return per_row[tool.name]


async def _one(runtime: ToolRuntime, row: int, call: ToolCall, kwargs: dict) -> CallResult:
    if call.error:
        return CallResult(call.name, call.arguments, f"Error: {call.error}", error=True)
    tool = runtime.tools.get(call.name)
    if tool is None:
        return CallResult(call.name, call.arguments, f"Error: there is no tool named {call.name!r}; the tools are "
                          f"{', '.join(sorted(runtime.tools))}.", error=True)
    if tool.sync:
        pending = _in_daemon_thread(runtime.loop, tool.impl.execute_sync, call.arguments)
    else:
        instance = await _instance(runtime, row, tool, kwargs)
        if isinstance(instance, _Raised):
            return _failed(runtime, call, instance)
        pending = _guarded(tool.impl.execute(instance, call.arguments))
    try:
        got = await asyncio.wait_for(pending, runtime.timeout)
    except asyncio.TimeoutError:
        got = _Raised(asyncio.TimeoutError())
    if isinstance(got, _Raised):
        return _failed(runtime, call, got)
    try:
        text, reward, _ = got
        text = getattr(text, "text", text)  # verl >= 0.5 returns a ToolResponse
        return CallResult(call.name, call.arguments, text if isinstance(text, str) else json.dumps(text),
                          reward=float(reward or 0.0))
    except Exception as exc:  # a tool that returns something else than (text, reward, metrics)
        return CallResult(call.name, call.arguments, f"Error: {type(exc).__name__}: {exc}", error=True)


def _failed(runtime: ToolRuntime, call: ToolCall, raised: _Raised) -> CallResult:
    if isinstance(raised.exc, asyncio.TimeoutError):
        return CallResult(call.name, call.arguments, _late(runtime, call.name), error=True, timeout=True)
    return CallResult(call.name, call.arguments, raised.text(), error=True)
