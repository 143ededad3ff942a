"""What a run says on the console: set-up stages with their durations, memory, and the end-of-run summary.

    with stage("loading smollm2-135m-instruct"):     # "ppokit: loading smollm2-135m-instruct… 3.1 s", once
        model = load(...)
    say(run_summary(history, out, wall_s=412.0))    # steps, wall time, s/step, reward and eval with their steps

Lines go to stderr in a terminal (next to the progress bar) and to stdout in a notebook (no red stderr
box); only rank 0 speaks (`set_quiet(True)` elsewhere). (What DeepSpeed's compiler probes write straight to
the file descriptors is captured by `ppokit.engine.quiet.captured_native_output` and logged at DEBUG.)
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import time
from pathlib import Path

from ppokit.liveline import LIVE as _LIVE
from ppokit.liveline import beside_live_line

logger = logging.getLogger("ppokit")
PREFIX = "ppokit: "
VISUALDL_TABS = ("scalar", "text", "hyper_parameters")  # the components ppokit writes, the charts first
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


def redraws(out) -> bool:
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
    with beside_live_line():
        try:
            from tqdm import tqdm

            tqdm.write(lines, file=stream())
        except ImportError:
            print(lines, file=stream(), flush=True)




@contextlib.contextmanager
def stage(what: str):
    """Say how long a slow set-up step took, once: "ppokit: loading X… 3.1 s".

    In a terminal "loading X…" shows while it runs and is completed in place; in a notebook the line is one
    output updated in place (a saved notebook keeps only the finished line); in a log file only the finished
    line is written.
    """
    if _quiet:
        yield
        return
    out = stream()
    show = _live_line(out, f"{PREFIX}{what}…")
    started = time.perf_counter()
    try:
        yield
    except BaseException:
        show(f"{PREFIX}{what}… failed after {time.perf_counter() - started:.1f} s")
        raise
    show(f"{PREFIX}{what}… {time.perf_counter() - started:.1f} s")


def _live_line(out, first: str):
    """Show `first` where it can be replaced; returns a function that writes the final line (once)."""
    if _in_notebook():
        try:
            from IPython.display import display

            handle = display({"text/plain": first}, raw=True, display_id=True)
            return lambda text: handle.update({"text/plain": text}, raw=True)
        except ImportError:
            pass
    if redraws(out):
        out.write(first)
        out.flush()
        _LIVE.append((out, first))

        def finish(text: str) -> None:
            if (out, first) in _LIVE:
                _LIVE.remove((out, first))
            out.write("\r\033[K" + text + "\n")
            out.flush()
        return finish
    return lambda text: (out.write(text + "\n"), out.flush())


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


def duration(seconds: float) -> str:
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


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _steps(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}–{last}"


def first_last(history: list[dict], key: str, window: int = 10) -> tuple[float, float, list, list] | None:
    """(mean of the first `window` values, mean of the last `window`, their steps) of `key` in `history`;
    the window shrinks to half the values so the two never overlap."""
    points = [(h.get("step"), float(h[key])) for h in history if isinstance(h.get(key), (int, float))]
    if not points:
        return None
    n = max(1, min(window, len(points) // 2 or 1))
    head, tail = points[:n], points[-n:]
    return _mean([v for _, v in head]), _mean([v for _, v in tail]), [s for s, _ in head], [s for s, _ in tail]


def span_line(history: list[dict], key: str, label: str) -> str | None:
    """"reward 0.63 (mean of steps 1–10) → 0.97 (steps 21–30)"; "eval accuracy 0.87 at step 10 → 1.00 at
    step 30"; one value: "eval accuracy 0.53 at step 30"."""
    points = [(h.get("step"), float(h[key])) for h in history if isinstance(h.get(key), (int, float))]
    if not points:
        return None
    if len(points) == 1:
        return f"{label} {points[0][1]:.3g} at step {points[0][0]}"
    if key.startswith("eval/"):  # evaluations are few and far apart: the first and the last, each at its step
        (s0, v0), (s1, v1) = points[0], points[-1]
        return f"{label} {v0:.2f} at step {s0} → {v1:.2f} at step {s1}"
    first, last, head, tail = first_last(history, key)
    if len(head) == 1:
        return f"{label} {first:.3g} at step {head[0]} → {last:.3g} at step {tail[0]}"
    return (f"{label} {first:.3g} (mean of {_steps(head[0], head[-1])}) → {last:.3g} "
            f"({_steps(tail[0], tail[-1])})")


def timing_line(history: list[dict], wall_s: float, after: dict[str, float] | None = None) -> str:
    """"done: 30 steps in 2 min 55 s, 4.1 s per training step (median); outside the steps: evaluations 63.0 s,
    final save 12.1 s": the wall time of the whole train() (set-up, evaluations and saves included), the median of
    the steps' own timing/step_s, then the work outside the steps on its own (timing/eval_s summed over the
    evaluations; `after`: {"final save": seconds})."""
    steps = [h["step"] for h in history if "step" in h]
    text = f"done: {len(steps)} steps in {duration(wall_s)}"
    per_step = [float(h["timing/step_s"]) for h in history if isinstance(h.get("timing/step_s"), (int, float))]
    if per_step:
        text += f", {_median(per_step):.1f} s per training step (median)"
    evals = sum(float(h["timing/eval_s"]) for h in history if isinstance(h.get("timing/eval_s"), (int, float)))
    outside = {"evaluations": evals, **(after or {})}
    said = [f"{name} {seconds:.1f} s" for name, seconds in outside.items() if seconds > 0]
    return text + ("; outside the steps: " + ", ".join(said) if said else "")


def run_summary(history: list[dict], output_dir: str | Path, wall_s: float, *, logging_dir: str | None = None,
                visualdl: bool = False, saved_model: bool = True, eval_data: str | None = None,
                after: dict[str, float] | None = None) -> str:
    """The lines a finished run ends with: steps and wall time, reward first → last, where things are, next commands.

    `wall_s` is the whole of `train()`; the s/step is the median of the steps' own `timing/step_s`.
    """
    out = Path(output_dir)
    lines = [timing_line(history, wall_s, after)]
    for key, label in (("reward/mean", "reward"), ("eval/accuracy", "eval accuracy")):
        line = span_line(history, key, label)
        if line:
            lines.append(line)
    if saved_model and (out / "config.json").exists():
        lines.append(f"final model: {out}/ (a Hugging Face folder: from_pretrained, python -m ppokit.export)")
    checkpoints = sorted(out.glob("checkpoint-*"), key=lambda p: _step_of(p.name))
    if checkpoints:
        names = ", ".join(p.name for p in checkpoints)
        lines.append(f"checkpoints: {names} in {out}/ (--resume_from_checkpoint auto continues the newest)")
    nxt = []
    q = shlex.quote  # pasted into a shell: a folder with a comma, a space or non-ASCII letters stays one word
    python = q(command_path("python"))
    if visualdl and logging_dir:  # VisualDL opens on the first listed tab; unlisted, the order is a set's
        nxt.append(f"{q(command_path('visualdl'))} --logdir {q(str(logging_dir))} --component_tabs "
                   f"{' '.join(VISUALDL_TABS)}")
    nxt.append(f"{python} -m ppokit.tracking.report {q(str(out))}")
    if saved_model and (out / "config.json").exists():
        nxt.append(f"{python} -m ppokit.eval --model {q(str(out))} --data {q(eval_data) if eval_data else 'TEST.jsonl'}"
                   " --n 4")
    lines.append("next:")
    lines += [f"    {command}" for command in nxt]
    return "\n".join(lines)


def command_path(name: str) -> str:
    """How to type `name` so that it is this environment's: the bare name when the shell finds this
    interpreter's own copy first (an activated venv), else its path (`.venv/bin/visualdl` after `make run`)."""
    import shutil

    here = Path(sys.executable).parent
    own = here / name
    if name == "python" and not own.exists():
        own = Path(sys.executable)
    found = shutil.which(name)
    if found and Path(found).parent.absolute() == here.absolute():
        return name
    if not own.exists():
        return name
    # From the folder that holds the venv (the repo after `make run`) the short path runs as typed:
    # .venv/bin/visualdl; from anywhere else the absolute one does.
    if own.absolute().parent.parent.parent == Path.cwd().absolute():
        return str(own.absolute().relative_to(Path.cwd().absolute()))
    return str(own.absolute())


def _step_of(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def summary_for(session, wall_s: float, after: dict[str, float] | None = None) -> str:
    """`run_summary` of a Session's finished `train()`."""
    from ppokit.tracking.backends import resolve_report_to

    args = session.args
    tracker = getattr(session, "_tracker", None)
    logging_dir = str(tracker.logging_dir) if tracker is not None else args.logging_dir
    return run_summary(session.history, args.output_dir, wall_s, logging_dir=logging_dir,
                       visualdl="visualdl" in resolve_report_to(args.report_to),
                       eval_data=first_dataset(args.eval_datasets), after=after)


def first_dataset(spec) -> str | None:
    """The first file of a dataset list; the whole value when it is itself a path (a folder named 'data,v2')."""
    if not spec:
        return None
    return str(spec) if os.path.exists(str(spec)) else str(spec).split(",")[0]
