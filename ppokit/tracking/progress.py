"""Console progress: a live bar (tqdm, notebook-aware) and a compact one-line summary per logging step."""

from __future__ import annotations

import math
import sys
from typing import Any

from ppokit.tracking.console import redraws

# (label, metric names tried in order) for the summary line and the bar's postfix
SUMMARY_FIELDS = (
    ("len", ("response_length/mean",)),
    ("kl", ("actor/kl",)),
    ("entropy", ("actor/entropy",)),
    ("eval", ("eval/reward/mean", "eval/reward", "eval/accuracy")),
)


def _number(metrics: dict[str, Any], names: tuple[str, ...]) -> float | None:
    for name in names:
        value = metrics.get(name)
        if value is None:
            continue
        try:
            value = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value):
            return value
    return None


def _g(value: float) -> str:
    return f"{value:.3g}"


# work between steps: named on its own, not in s/step nor among the per-step phase means
AFTER_STEP = ("timing/eval_s", "timing/save_s", "timing/final_save_s", "timing/eval_judge_s")


def step_seconds(metrics: dict[str, Any]) -> float | None:
    """Seconds the step took: ``timing/step_s`` when logged, else the sum of the ``timing/*_s`` phases."""
    total = _number(metrics, ("timing/step_s",))
    if total is not None:
        return total
    phases = [_number(metrics, (k,)) for k in metrics
              if k.startswith("timing/") and k.endswith("_s") and k not in AFTER_STEP]
    phases = [p for p in phases if p is not None]
    return sum(phases) if phases else None


def format_summary(step: int, metrics: dict[str, Any], total: int | None = None) -> str:
    """A one-line summary, e.g. ``step 12/40 | reward 0.62±0.31 | len 41.2 | kl 0.003 | 12.4s/step | 310 tok/s |
    mem 1.41 GB`` (memory: the GPU's peak allocation, else the process's resident memory); a step followed by an
    evaluation adds ``+ evaluation 63.0s`` (and a save ``+ save 12.1s`` where the loop records one).

    Metrics that were not logged (or are NaN) are left out rather than shown as zero.
    """
    parts = [f"step {step}/{total}" if total else f"step {step}"]
    mean = _number(metrics, ("reward/mean",))
    std = _number(metrics, ("reward/std",))
    if mean is not None:
        parts.append(f"reward {_g(mean)}±{_g(std)}" if std is not None else f"reward {_g(mean)}")
    for label, names in SUMMARY_FIELDS:
        value = _number(metrics, names)
        if value is not None:
            parts.append(f"{label} {_g(value)}")
    seconds = step_seconds(metrics)
    if seconds is not None:
        parts.append(f"{seconds:.1f}s/step")
    for label, key in (("evaluation", "timing/eval_s"), ("save", "timing/save_s")):
        extra = _number(metrics, (key,))
        if extra is not None:  # done after the step, outside its s/step: named, so a slow step is explained
            parts.append(f"+ {label} {extra:.1f}s")
    tokens = _number(metrics, ("throughput/tokens_per_s",))
    if tokens is not None:
        parts.append(f"{tokens:.0f} tok/s")
    memory = _number(metrics, ("memory/peak_gb", "memory/rss_gb"))
    if memory is not None:
        parts.append(f"mem {memory:.2f} GB" + (" peak" if "memory/peak_gb" in metrics else ""))
    return " | ".join(parts)


class ConsoleProgress:
    """A progress bar over training steps (i/total, ETA, reward) above the step lines.

    ``disable=True`` (quiet ranks) prints nothing; ``bar=False`` (PaddleNLP's ``disable_tqdm``) keeps the
    step lines and drops the bar. Uses ``tqdm.auto`` (a widget in Jupyter, a text bar in a terminal) when
    tqdm is installed; where stderr is not a terminal (a log file, a pipe) there is no bar either, so the
    file holds plain step lines rather than the bar's redrawn frames.
    """

    def __init__(self, total: int, disable: bool = False, desc: str = "train", initial: int = 0,
                 bar: bool = True):
        self.total = int(total)
        self.disable = bool(disable)
        self.step = int(initial)
        self._bar = None
        if self.disable or not bar or not redraws(sys.stderr):
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=self.total, initial=self.step, desc=desc, unit="step", dynamic_ncols=True)

    def update(self, step: int, metrics: dict[str, Any] | None = None) -> None:
        """Move the bar to ``step`` (steps done) and show the step's reward/kl."""
        if self.disable:
            return
        metrics = metrics or {}
        advance = int(step) - self.step
        self.step = int(step)
        if self._bar is None:  # no bar: the per-step lines (`write`) say it all
            return
        postfix = {}
        mean = _number(metrics, ("reward/mean",))
        if mean is not None:
            postfix["reward"] = _g(mean)
        kl = _number(metrics, ("actor/kl",))
        if kl is not None:
            postfix["kl"] = _g(kl)
        if postfix:
            self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(advance)

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` of work between steps (an evaluation, a save) out of the bar's s/step and ETA: its clock
        moves on as if they had not passed; the step line names them on their own."""
        if self._bar is not None and seconds > 0:
            self._bar.start_t += seconds
            self._bar.last_print_t += seconds

    def write(self, line: str) -> None:
        """Print a line (e.g. ``format_summary``) above the bar without breaking it."""
        if self.disable:
            return
        if self._bar is None:
            print(line, file=sys.stderr)
        else:
            self._bar.write(line, file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> ConsoleProgress:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()


class PhaseBar:
    """A bar for one long phase outside the steps (an evaluation, `python -m ppokit.eval`): `tqdm.auto` where the
    console redraws (a terminal, Jupyter), nothing elsewhere (a log file keeps the one line that says what runs).
    `disable=True` (other ranks, disable_tqdm) shows nothing."""

    def __init__(self, total: int, desc: str, unit: str, disable: bool = False):
        self._bar = None
        if disable or total <= 1 or not redraws(sys.stderr):
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, leave=False)

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
