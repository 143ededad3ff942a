"""A step's timeline: when the rollout, the reward, the log-probs and the update of each step ran, on which thread,
drawn as one static SVG (no script, no network), e.g. the synchronous step against the asynchronous one
(docs/async.md, notebooks/05_async_timeline.ipynb).

    timeline = Timeline()
    batch = timeline.produce(s.produce)()                      # stamps the rollout and reward of the batch
    metrics = timeline.consume(s.consume, batch)              # stamps its log-probs, update and the rest
    timeline.watch(s.pipeline)                                # a producer thread: its waits are not update
    batch = s.pipeline.next_batch(timeline.produce(s.produce))  # the queue's producer, maybe in its thread
    display(HTML(timeline_svg(timeline.spans, "k = 1")))

Each call is stamped with the wall clock where it starts and ends; the phases inside it are laid out from the
durations the step measures itself (`timing/rollout_s`, `timing/reward_s`, `timing/ref_s`, `timing/old_logprob_s`,
`timing/update_s`), so the bars are the step's own numbers, in the order the phases run. The update's time holds
the weight sync, which with a producer thread first waits for the batch being generated; `watch(pipeline)` times
those waits, so the update bar is the update and the wait is drawn as such.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html import escape

from ppokit.tracking.svg import PALETTE, fmt_number, nice_ticks

PHASES = {"rollout": PALETTE[0], "reward": PALETTE[3], "log-probs": PALETTE[4], "update": PALETTE[2],
          "wait + log": "#c7c7c7"}


@dataclass
class Span:
    """One phase of one batch: `lane` is the thread it ran on, `batch` the index of the batch it worked on."""

    lane: str
    phase: str
    start: float
    end: float
    batch: int


@dataclass
class Timeline:
    """Wall-clock stamps of `produce` and `consume` calls, as spans per phase (seconds since the Timeline began)."""

    spans: list[Span] = field(default_factory=list)
    origin: float = field(default_factory=time.perf_counter)
    produced: int = 0
    consumed: int = 0
    waited: float = 0.0  # seconds spent waiting for the producer thread since the current consume began
    ends: list[float] = field(default_factory=list)  # when each consume returned
    paused_at: float | None = field(default_factory=time.perf_counter)  # outside `running()` since then

    @contextlib.contextmanager
    def running(self):
        """This side's step runs now: its clock counts only inside `running()` blocks, so two sides whose steps are
        taken in turn (synchronous, asynchronous, synchronous, ...) each get a timeline of their own steps alone."""
        if self.paused_at is not None:
            self.origin += time.perf_counter() - self.paused_at
            self.paused_at = None
        try:
            yield
        finally:
            self.paused_at = time.perf_counter()

    def watch(self, pipeline) -> None:
        """Time every `pipeline.wait()` (the weight sync's wait for the producer thread) on this pipeline."""
        wait = pipeline.wait

        def timed_wait():
            started = time.perf_counter()
            try:
                wait()
            finally:
                self.waited += time.perf_counter() - started

        pipeline.wait = timed_wait

    def _now(self) -> float:
        return time.perf_counter() - self.origin

    def produce(self, produce: Callable):
        """`produce` wrapped: each call adds its batch's rollout and reward spans, on the thread that ran it."""

        def stamped():
            index, self.produced = self.produced, self.produced + 1
            start = self._now()
            batch = produce()
            self._lay_out(_lane(), index, start, self._now(),
                          [("rollout", batch.stats.get("timing/rollout_s", 0.0)),
                           ("reward", batch.stats.get("timing/reward_s", 0.0))])
            return batch

        return stamped

    def consume(self, consume: Callable, batch) -> dict:
        """`consume(batch)` stamped: its log-probs and update spans, then what is left of the call (waiting for
        a producer thread, logging). Returns consume's metrics."""
        index, self.consumed = self.consumed, self.consumed + 1
        start, self.waited = self._now(), 0.0
        metrics = consume(batch)
        logprobs = metrics.get("timing/ref_s", 0.0) + metrics.get("timing/old_logprob_s", 0.0)
        update = max(metrics.get("timing/update_s", 0.0) - self.waited, 0.0)  # the sync's wait is at its end
        self.ends.append(self._now())
        self._lay_out(_lane(), index, start, self.ends[-1], [("log-probs", logprobs), ("update", update)],
                      rest="wait + log")
        return metrics

    def step_seconds(self) -> list[float]:
        """Wall time of each step: from the end of one consume to the end of the next (the first from the start)."""
        return [b - a for a, b in zip([0.0, *self.ends], self.ends)]

    def _lay_out(self, lane: str, index: int, start: float, end: float, phases, rest: str | None = None) -> None:
        """Phases back to back from `start`, each cut at `end`; `rest` names the time left up to `end`."""
        at = start
        for phase, seconds in phases:
            stop = min(at + max(float(seconds), 0.0), end)
            self.spans.append(Span(lane, phase, at, stop, index))
            at = stop
        if rest is not None and end > at:
            self.spans.append(Span(lane, rest, at, end, index))

    def total(self) -> float:
        """Seconds from the first span's start to the last one's end."""
        return max((s.end for s in self.spans), default=0.0) - min((s.start for s in self.spans), default=0.0)


def _lane() -> str:
    return "main thread" if threading.current_thread() is threading.main_thread() else "producer thread"


def timeline_svg(spans: list[Span], title: str, width: int = 640) -> str:
    """One row per lane (thread), a bar per span coloured by phase and labelled with its batch, an axis in seconds
    from the first span; each bar's tooltip (`<title>`) gives its phase, batch and times."""
    lanes = list(dict.fromkeys(s.lane for s in spans))
    left, right, top, row = 110, 16, 46, 34
    height = top + row * max(len(lanes), 1) + 30
    out = [f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="16" font-size="14" font-weight="bold">{escape(title)}</text>']
    out += _legend(left, 32)
    if not spans:
        return "".join(out) + f'<text x="{left}" y="{top + 14}">no step was stamped</text></svg>'
    t0, t1 = min(s.start for s in spans), max(s.end for s in spans)
    t1 = t1 if t1 > t0 else t0 + 1.0

    def sx(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * (width - left - right)

    for i, lane in enumerate(lanes):
        out.append(f'<text x="{left - 6}" y="{top + i * row + row / 2 + 4}" text-anchor="end">{escape(lane)}</text>')
    for s in spans:
        y, x, w = top + lanes.index(s.lane) * row + 4, sx(s.start), max(sx(s.end) - sx(s.start), 0.5)
        tip = f"{s.phase}, batch {s.batch}: {fmt_number(s.start - t0)}-{fmt_number(s.end - t0)} s"
        out.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 8}" fill="{PHASES.get(s.phase, "#999")}"'
                   f' stroke="white" stroke-width="0.5"><title>{escape(tip)}</title></rect>')
        if w > 14 and s.phase in ("rollout", "update"):
            out.append(f'<text x="{x + w / 2:.1f}" y="{y + row / 2}" text-anchor="middle" fill="white">{s.batch}</text>')
    base = top + row * len(lanes) + 4
    out.append(f'<line x1="{left}" y1="{base}" x2="{width - right}" y2="{base}" stroke="#444"/>')
    for tick in nice_ticks(0.0, t1 - t0):
        x = sx(t0 + tick)
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" stroke="#444"/>'
                   f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle">{escape(fmt_number(tick))} s</text>')
    return "".join(out) + "</svg>"


def _legend(x: float, y: float) -> list[str]:
    out = []
    for name, color in PHASES.items():
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14}" y="{y}">{escape(name)}</text>')
        x += 24 + 7 * len(name)
    return out


COMPUTE_NOISE = 0.3  # step-to-step spread of one phase on a shared 2-core machine: differences above it are said
CHECKED_PHASES = (("rollout compute", ("timing/rollout_s",)),
          ("log-probs + update", ("timing/ref_s", "timing/old_logprob_s", "timing/update_s")),
          ("reward wait", ("timing/reward_s",)))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def compute_check(sync: list[dict], asynchronous: list[dict], noise: float = COMPUTE_NOISE) -> str:
    """Each phase's time per step (median over the steps' metrics) of the two sides beside each other, then one
    sentence: the compute agrees within `noise` (the wall-time gap is what overlap hides), or it differs and by
    how much (the two sides did not run under the same conditions, or, slower asynchronously, the overlapped
    phases shared the cores). A comparison of wall times is only as fair as this table."""
    lines = [f"{'compute per step (median)':<26}{'synchronous':>12}{'asynchronous':>14}"]
    differ = []
    for label, keys in CHECKED_PHASES:
        a, b = (_median([sum(float(m.get(k, 0.0)) for k in keys) for m in side]) for side in (sync, asynchronous))
        lines.append(f"{label + ' (s)':<26}{a:>12.2f}{b:>14.2f}")
        if label != "reward wait" and min(a, b) > 0 and max(a, b) / min(a, b) > 1 + noise:
            differ.append((label, b / a))
    if not differ:
        lines.append(f"the two sides' compute agrees within {noise:.0%}: the wall-time difference is what the "
                     "asynchronous step hides")
        return "\n".join(lines)
    said = ", ".join(f"{label} {ratio:.2g}x" for label, ratio in differ)
    why = ("the asynchronous side's phases shared the cores with each other (overlap's price on one device), or, on a "
           "CPU, its producer decoded on half the run's threads (an asynchronous run's default; the synchronous side "
           "decodes on all of them: docs/performance.md)"
           if all(r > 1 for _, r in differ) else
           "the two sides did not run under the same conditions (load, threads): the wall-time gap is not overlap "
           "alone")
    lines.append(f"the two sides' compute differs by more than noise ({noise:.0%}): asynchronous/synchronous "
                 f"{said}; {why}")
    return "\n".join(lines)
