"""What a run says on the console: set-up stages with their durations, memory, and the end-of-run summary.

    with stage("loading smollm2-135m-instruct"):     # "ppokit: loading smollm2-135m-instruct… 3.1 s"
        model = load(...)
    say(run_summary(history, args, wall_s=412.0))   # steps, wall time, reward first-10 → last-10, next commands

Lines go to stderr in a terminal (next to the progress bar) and to stdout in a notebook (no red stderr
box); only rank 0 speaks (`set_quiet(True)` elsewhere). (What DeepSpeed's compiler probes write straight to
the file descriptors is captured by `ppokit.engine.quiet.captured_native_output` and logged at DEBUG.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path

logger = logging.getLogger("ppokit")
PREFIX = "ppokit: "
_quiet = False


def set_quiet(quiet: bool) -> None:
    """Silence `say` and `stage` (ranks other than 0)."""
    global _quiet
    _quiet = bool(quiet)


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython") and getattr(sys.modules["IPython"], "get_ipython", lambda: None)()
    return shell is not None and any(c.__name__ == "ZMQInteractiveShell" for c in type(shell).__mro__)


def stream():
    """stdout in a notebook, stderr elsewhere (where the progress bar and the log lines go)."""
    return sys.stdout if _in_notebook() else sys.stderr


def _redraws(out) -> bool:
    """Whether "\\r" rewrites the current line (a terminal, or Jupyter's stream output)."""
    try:
        return out.isatty() or _in_notebook()
    except (AttributeError, ValueError):
        return False


def say(text: str) -> None:
    """Print `text` (each line prefixed "ppokit: ") without breaking a tqdm bar."""
    if _quiet or not text:
        return
    lines = "\n".join(PREFIX + line if line.strip() else line for line in text.splitlines())
    try:
        from tqdm import tqdm

        tqdm.write(lines, file=stream())
    except ImportError:
        print(lines, file=stream(), flush=True)


@contextlib.contextmanager
def stage(what: str):
    """Say `what…` before a slow set-up step and how long it took after it: "ppokit: loading X… 3.1 s".

    In a terminal or notebook the line is completed in place; in a log file the finished line follows.
    """
    if _quiet:
        yield
        return
    out = stream()
    live = _redraws(out)
    out.write(f"{PREFIX}{what}…" + ("" if live else "\n"))
    out.flush()
    started = time.perf_counter()
    try:
        yield
    except BaseException:
        out.write(("\r" if live else "") + f"{PREFIX}{what}… failed after {time.perf_counter() - started:.1f} s\n")
        raise
    out.write(("\r" if live else "") + f"{PREFIX}{what}… {time.perf_counter() - started:.1f} s\n")
    out.flush()


@contextlib.contextmanager
def quiet_hf_progress():
    """No "Loading weights" / "Writing model shards" bars from transformers (a widget each in a notebook)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


# ---------------------------------------------------------------------------- memory


def memory_metrics(device=None) -> dict[str, float]:
    """memory/rss_gb (this process), and on a GPU memory/allocated_gb and memory/peak_gb (torch's allocator)."""
    out: dict[str, float] = {}
    rss = _rss_bytes()
    if rss is not None:
        out["memory/rss_gb"] = rss / 2**30
    try:
        import torch

        if torch.cuda.is_available() and (device is None or getattr(device, "type", str(device)) == "cuda"):
            out["memory/allocated_gb"] = torch.cuda.memory_allocated(device) / 2**30
            out["memory/peak_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    except Exception:  # no torch / no CUDA context: RSS alone
        pass
    return out


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024
    except (ImportError, OSError):
        return None


# ---------------------------------------------------------------------------- the end of a run


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def first_last(history: list[dict], key: str, window: int = 10) -> tuple[float, float, int] | None:
    """(mean of the first `window` values, mean of the last `window`, window used) of `key` in `history`."""
    values = [float(h[key]) for h in history if isinstance(h.get(key), (int, float))]
    if not values:
        return None
    n = max(1, min(window, len(values) // 2 or 1))
    return _mean(values[:n]), _mean(values[-n:]), n


def run_summary(history: list[dict], output_dir: str | Path, wall_s: float, *, logging_dir: str | None = None,
                visualdl: bool = False, saved_model: bool = True, eval_data: str | None = None) -> str:
    """The lines a finished run ends with: steps and wall time, reward first → last, where things are, next commands."""
    out = Path(output_dir)
    steps = [h["step"] for h in history if "step" in h]
    lines = [f"done: {len(steps)} steps in {_duration(wall_s)}"
             + (f" ({wall_s / len(steps):.1f} s/step)" if steps else "")]
    for key, label in (("reward/mean", "reward"), ("eval/accuracy", "eval accuracy")):
        span = first_last(history, key)
        if span is not None:
            first, last, n = span
            span_text = "step" if n == 1 else f"{n} steps"
            lines.append(f"{label} {first:.3g} (first {span_text}) → {last:.3g} (last {span_text})")
    if saved_model and (out / "config.json").exists():
        lines.append(f"final model: {out}/ (a Hugging Face folder: from_pretrained, python -m ppokit.export)")
    checkpoints = sorted(out.glob("checkpoint-*"), key=lambda p: _step_of(p.name))
    if checkpoints:
        names = ", ".join(p.name for p in checkpoints)
        lines.append(f"checkpoints: {names} in {out}/ (--resume_from_checkpoint auto continues the newest)")
    nxt = []
    if visualdl and logging_dir:
        nxt.append(f"visualdl --logdir {logging_dir}")
    nxt.append(f"python -m ppokit.tracking.report {out}")
    if saved_model and (out / "config.json").exists():
        nxt.append(f"python -m ppokit.eval --model {out} --data {eval_data or 'TEST.jsonl'} --n 4")
    lines.append("next:")
    lines += [f"    {command}" for command in nxt]
    return "\n".join(lines)


def _step_of(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def summary_for(session, wall_s: float) -> str:
    """`run_summary` of a Session's finished `train()`."""
    from ppokit.tracking.backends import resolve_report_to

    args = session.args
    tracker = getattr(session, "_tracker", None)
    logging_dir = str(tracker.logging_dir) if tracker is not None else args.logging_dir
    return run_summary(session.history, args.output_dir, wall_s, logging_dir=logging_dir,
                       visualdl="visualdl" in resolve_report_to(args.report_to),
                       eval_data=str(args.eval_datasets).split(",")[0] if args.eval_datasets else None)
