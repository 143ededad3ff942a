"""Facts the report states in words: the run's outcome like the console's summary, why the wall-time line has
gaps, and which series it (and VisualDL) leave out."""

from __future__ import annotations

import re
from html import escape

from ppokit.tracking.console import span_line, timing_line


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _step(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def outcome_lines(rows: list[dict], wall_s, interrupted: bool = False, final_save_s=None) -> list[str]:
    """What the console says at the end: "30 steps in 4 min 53 s, 8.2 s per training step (median)", the
    reward first → last and the eval accuracy first → last (each with its steps). ``wall_s`` is the tracker's
    (tracking_state.json); without it, or for an interrupted run, the last row's time."""
    if not rows:
        return []
    wall = wall_s
    if not _is_number(wall) or interrupted:
        wall = next((r["time"] for r in reversed(rows) if _is_number(r.get("time"))), None)
    after = {"final save": float(final_save_s)} if _is_number(final_save_s) else None
    lines = [timing_line(rows, wall, after).removeprefix("done: ") if _is_number(wall) else f"{len(rows)} steps"]
    for key, label in (("reward/mean", "reward"), ("eval/accuracy", "eval accuracy")):
        text = span_line(rows, key, label)
        if text:
            lines.append(text)
    return lines


def wall_time_gaps(rows: list[dict], plan: dict | None) -> list[str]:
    """Why the reward-by-wall-time line has gaps: the steps followed by much more time than a step takes, each
    with what ran then (an evaluation, with its seconds; a checkpoint save, by the run's save cadence)."""
    saves = re.fullmatch(r"every (\d+ steps|step)", str((plan or {}).get("save_every", "")))
    every = (1 if saves.group(1) == "step" else int(saves.group(1).split()[0])) if saves else None
    times = [(r["step"], r["time"], r) for r in rows if _is_number(r.get("time"))]
    if len(times) < 3:
        return []
    deltas = sorted(b - a for (_, a, _), (_, b, _) in zip(times, times[1:]))
    typical = deltas[len(deltas) // 2]
    out = []
    for (step, t0, row), (nxt, t1, _) in zip(times, times[1:]):
        extra = (t1 - t0) - typical
        if extra < max(2.0, typical):  # less than one more step: nothing to explain
            continue
        why = []
        if _is_number(row.get("timing/eval_s")):
            why.append(f"an evaluation ({row['timing/eval_s']:.1f} s)")
        if every and isinstance(step, int) and step % every == 0:
            why.append("a checkpoint save")
        reason = " and ".join(why) if why else "nothing the run recorded (another process, or the machine)"
        out.append(f"steps {_step(step)} → {_step(nxt)}: {extra:.0f} s more than a step, {reason}")
    return out


def left_out_section(dropped: dict[str, str]) -> str:
    """One note for the series neither this page nor VisualDL charts (``ppokit.tracking.vdl.left_out``)."""
    if not dropped:
        return ""
    items = "".join(f"<li><code>{escape(k)}</code>: {escape(v)}</li>" for k, v in dropped.items())
    return ('<h2>Not charted</h2><p class="facts">In metrics.jsonl, but neither charted here nor written to '
            f"VisualDL, because a chart would only repeat another or draw a flat line:</p><ul>{items}</ul>")
