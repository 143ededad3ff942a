"""Tracker: one object that records a run's metrics, sample generations and arguments.

Files in ``output_dir`` (always, whatever ``report_to`` says):
  metrics.jsonl   {"step", "time" (wall seconds of training, continued across resumes), metric: value}
  samples.jsonl   {"step", "prompt", "response", "reward", ...}
  args.json       the resolved arguments
  args_info.json  their defaults, the keys that have no effect here, the run's plan (for the report)
  tracking_state.json   the run's start (UTC), its wall seconds when closed, and the VisualDL file it writes
                        (so a resume continues its curves and the report its clock)
VisualDL records go to a folder of ``logging_dir`` named after the run (PaddleNLP's meaning of logging_dir:
the directory ``visualdl --logdir`` reads, where runs then show side by side), see ``ppokit.tracking.vdl``.
"""

from __future__ import annotations

import json
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ppokit.errors import PpokitError
from ppokit.tracking.backends import (
    ARGS_INFO,
    Backend,
    args_info,
    compact_hparams,
    dump_args,
    hparams_for_backends,
    note,
    open_backends,
    resolve_report_to,
)
from ppokit.tracking.jsonl import JsonlWriter, to_jsonable, to_number, truncate_jsonl
from ppokit.tracking.vdl import VisualDLBackend, run_folder


class EarlierRecordsError(PpokitError):
    """A new Tracker would replace an earlier run's metrics.jsonl/samples.jsonl without being asked."""


DEFAULT_HPARAM_METRICS = ("reward/mean", "eval/accuracy", "actor/kl", "response_length/mean")
STATE_FILE = "tracking_state.json"
SAMPLES_SHOWN = 4
TEXT_LIMIT = 1500


def default_run_name() -> str:
    """PaddleNLP's run folder when logging_dir is None (output_dir/runs/<Mon dd_HH-MM-SS>_<hostname>)."""
    return f"{datetime.now().strftime('%b%d_%H-%M-%S')}_{socket.gethostname()}"


class Tracker:
    """Record a run: ``log`` metrics, ``log_samples`` generations, ``log_hparams`` arguments.

    ``enabled=False`` (non-zero ranks) turns every call into a no-op that creates no files.
    ``resume_step=N`` continues an earlier run in the same ``output_dir``: rows after step N are
    dropped from the JSONL files, wall time continues from the last kept row, and the VisualDL
    curves up to step N are carried into this run's record file. Without it, an earlier run's non-empty
    JSONL files in ``output_dir`` stop the Tracker (``EarlierRecordsError``) unless ``replace=True``, which
    replaces them with a note: a run's records are never erased unasked.

    VisualDL records go to ``logging_dir/<run_name or the output folder's name>`` (``-2``, ``-3`` ... when
    another run already wrote there); a resume continues its own folder. ``logging_dir=None`` is PaddleNLP's
    ``output_dir/runs/<date>_<host>``.
    """

    def __init__(
        self,
        output_dir: str | os.PathLike,
        logging_dir: str | os.PathLike | None = "vdl_log",
        report_to: str | list[str] | None = None,
        enabled: bool = True,
        run_name: str | None = None,
        resume_step: int | None = None,
        replace: bool = False,
    ):
        self.enabled = bool(enabled)
        self.output_dir = Path(output_dir)
        self.report_to = resolve_report_to(report_to)
        self.logging_dir = Path(logging_dir) if logging_dir else self.output_dir / "runs"
        self.run_name = run_name
        self.run_dir: Path | None = None  # this run's folder of logging_dir (set when enabled)
        self.metrics_path = self.output_dir / "metrics.jsonl"
        self.samples_path = self.output_dir / "samples.jsonl"
        self.args_path = self.output_dir / "args.json"
        self.backends: list[Backend] = []
        self._writers: dict[str, JsonlWriter] = {}
        self._start = time.monotonic()
        self._time_offset = 0.0
        self._kept_rows: list[dict] = []
        self._logged = False
        self._closed = False
        self._remembered: dict[str, float] = {}  # facts for tracking_state.json (the final save's seconds)
        if not self.enabled:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        state = self._previous_state()
        previous_vdl = self._previous_visualdl_file(state)
        if resume_step is None:
            self._start_fresh(replace)
            state = {}
        else:
            self.truncate_after(resume_step)
        self.started_at = state.get("started_at") or datetime.now(timezone.utc).isoformat(timespec="seconds")
        if resume_step is not None and previous_vdl:
            self.run_dir = Path(previous_vdl).parent  # a resume continues its own folder
        else:
            name = run_name or (default_run_name() if not logging_dir else self.output_dir.resolve().name)
            self.run_dir = run_folder(self.logging_dir, name)
        where, top = self.run_dir.resolve(), self.logging_dir.resolve()
        display = where.relative_to(top).as_posix() if where.is_relative_to(top) else where.name
        self.backends = open_backends(
            self.report_to, self.run_dir, display, self.output_dir, run_name, resume_step
        )
        if resume_step is not None and previous_vdl:
            self._carry_over_visualdl(previous_vdl, resume_step)
        self._save_state()

    # ----------------------------------------------------------------- recording

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Append ``{"step", "time", **metrics}`` to metrics.jsonl and send finite values to the backends.

        Values must be single numbers (floats, ints, bools, 0-d tensors); NaN/inf are written as
        null in metrics.jsonl and left out of VisualDL.
        """
        if not self.enabled:
            return
        self._check_open()
        step = _as_step(step)
        clean = {name: _metric_value(name, value) for name, value in metrics.items()}
        self._logged = True
        self._writer("metrics").write({"step": step, "time": round(self.elapsed(), 3), **clean})
        finite = {name: float(v) for name, v in clean.items() if v is not None}
        for backend in self.backends:
            backend.scalars(step, finite)
            backend.flush()

    def log_samples(self, step: int, rows: list[dict]) -> None:
        """Append generations (prompt, response, reward, ...) to samples.jsonl; show a few in VisualDL text."""
        if not self.enabled:
            return
        self._check_open()
        step = _as_step(step)
        rows = [to_jsonable(dict(row)) for row in rows]
        writer = self._writer("samples")
        for row in rows:
            writer.write({"step": step, **{k: v for k, v in row.items() if k != "step"}})
        if rows:
            text = render_samples_markdown(step, rows)
            for backend in self.backends:
                if isinstance(backend, VisualDLBackend):  # plain text there: one short paragraph per sample
                    backend.samples(step, sample_lines(rows))
                else:
                    backend.text(step, "samples", text)
                backend.flush()

    def log_hparams(
        self, hparams: Any, metrics: tuple[str, ...] | list[str] = DEFAULT_HPARAM_METRICS, plan: Any = None
    ) -> None:
        """Write the resolved arguments to args.json and their scalar entries to the hparams panels.

        ``hparams`` is a dict or a pydantic model (then args_info.json also gets each key's default and the
        keys that have no effect, so the report can show what was changed); ``plan`` (a dict or an object
        with ``to_dict``: the run's batch/step plan) goes to args_info.json too. ``metrics`` names the
        scalars VisualDL's hyper-parameter view compares runs by.
        """
        if not self.enabled:
            return
        self._check_open()
        info = args_info(hparams)
        if plan is not None:
            info["plan"] = plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)
        if hasattr(hparams, "model_dump"):
            hparams = hparams.model_dump(mode="json")
        hparams = dict(hparams)
        for path, text in ((self.args_path, dump_args(hparams)), (self.output_dir / ARGS_INFO, dump_args(info))):
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        scalars = hparams_for_backends(hparams)
        for backend in self.backends:  # VisualDL's table: the keys a user changed first (compact_hparams)
            backend.hparams(compact_hparams(scalars, info) if isinstance(backend, VisualDLBackend) else scalars,
                            list(metrics))
            backend.flush()

    # ----------------------------------------------------------------- resume

    def truncate_after(self, step: int) -> int:
        """Drop rows with step > ``step`` from metrics.jsonl and samples.jsonl; returns rows dropped.

        Wall time then continues from the last kept metrics row. (VisualDL history is handled by
        ``Tracker(..., resume_step=step)``, which starts a new record file.)
        """
        if not self.enabled:
            return 0
        step = _as_step(step)
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        kept, dropped = truncate_jsonl(self.metrics_path, step)
        _, dropped_samples = truncate_jsonl(self.samples_path, step)
        times = [r["time"] for r in kept if isinstance(r.get("time"), (int, float))]
        self._time_offset = max(times, default=0.0)
        self._start = time.monotonic()
        self._kept_rows = kept
        return dropped + dropped_samples

    def start_clock(self) -> None:
        """The run's clock (the ``time`` of metrics rows) starts now, unless a step was logged already.

        ``Session.train`` calls it before the first step, so ``time`` counts that step too (a Tracker is
        otherwise opened by the first ``log``, after the first step's work).
        """
        if self.enabled and not self._logged and not self._time_offset:
            self._start = time.monotonic()
            self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self._save_state()

    def remember(self, **facts: float) -> None:
        """Keep facts about the run outside its steps in tracking_state.json (e.g. final_save_s: the report
        names it apart from the per-step times)."""
        if self.enabled:
            self._remembered.update(facts)
            self._save_state()

    def elapsed(self) -> float:
        """Wall seconds of training so far (including the time before a resume)."""
        return self._time_offset + (time.monotonic() - self._start)

    # ----------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Flush and close every file and backend; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.enabled:
            self._save_state(wall_s=round(self.elapsed(), 3))
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        for backend in self.backends:
            backend.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    @property
    def visualdl_file(self) -> str | None:
        """The VisualDL record file this run writes, when VisualDL is on."""
        for backend in self.backends:
            if isinstance(backend, VisualDLBackend):
                return backend.file
        return None

    # ----------------------------------------------------------------- internals

    def _writer(self, kind: str) -> JsonlWriter:
        if kind not in self._writers:
            path = self.metrics_path if kind == "metrics" else self.samples_path
            self._writers[kind] = JsonlWriter(path)
        return self._writers[kind]

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                "This Tracker is closed; create a new Tracker (with resume_step=N to continue)."
            )

    def _start_fresh(self, replace: bool) -> None:
        """A new run's files: an earlier run's non-empty metrics/samples files are its results, so they are
        refused unless ``replace`` (the caller was asked to replace them; a note says so)."""
        existing = [p for p in (self.metrics_path, self.samples_path) if p.exists()]
        if any(p.stat().st_size for p in existing) and not replace:
            raise EarlierRecordsError(
                f"{self.output_dir} holds {' and '.join(p.name for p in existing)} of an earlier run; pass "
                "resume_step=N to continue that run, replace=True to replace its files, or use another folder."
            )
        if existing:
            if any(p.stat().st_size for p in existing):
                note(f"replacing {' and '.join(p.name for p in existing)} of an earlier run in {self.output_dir}.")
            for path in existing:
                path.unlink()

    def _previous_state(self) -> dict:
        try:
            state = json.loads((self.output_dir / STATE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    @staticmethod
    def _previous_visualdl_file(state: dict) -> str | None:
        path = state.get("visualdl_file")
        return path if isinstance(path, str) and Path(path).exists() else None

    def _carry_over_visualdl(self, previous: str, step: int) -> None:
        backend = next((b for b in self.backends if isinstance(b, VisualDLBackend)), None)
        if backend is None or Path(previous).resolve() == Path(backend.file).resolve():
            return
        try:
            backend.carry_over(previous, step)
        except Exception as exc:  # a record file cut short by a crash may not parse to the end
            note(
                f"could not copy the VisualDL history up to step {step} from {previous} ({exc}); "
                "VisualDL will show this run from the resumed step on, metrics.jsonl has all of it."
            )
        backend.replay(self._kept_rows)  # copies held back so far (reward/rule = reward/mean) stay complete
        backend.flush()

    def _save_state(self, wall_s: float | None = None) -> None:
        state = {"started_at": self.started_at, "wall_s": wall_s,
                 "visualdl_file": str(Path(self.visualdl_file).resolve()) if self.visualdl_file else None,
                 **self._remembered}
        (self.output_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")


def _as_step(step: Any) -> int:
    try:
        number = int(step)
    except (TypeError, ValueError):
        number = None
    if number is None or number != step or isinstance(step, bool):
        raise TypeError(f"The step must be a whole number, got {step!r}.")
    return number


def _metric_value(name: Any, value: Any) -> float | int | None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"Metric names must be non-empty strings, got {name!r}.")
    if name in ("step", "time"):
        raise ValueError(f"The metric name {name!r} is reserved for the row itself; rename the metric.")
    if "%" in name:
        raise ValueError(f"The metric name {name!r} contains '%', which VisualDL cannot store; rename it.")
    try:
        return to_number(value)
    except TypeError:
        raise TypeError(
            f"The metric {name!r} is {value!r}; metrics must be single numbers (text goes to log_samples)."
        ) from None


def _clip(text: Any, limit: int = TEXT_LIMIT) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more characters)"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    return str(value)


def sample_lines(rows: list[dict], shown: int = SAMPLES_SHOWN) -> list[str]:
    """One line per sample, e.g. "reward 1 · advantage 0.71 · Q: What is 3 + 4? · A: The answer is 7".

    VisualDL shows text as one plain paragraph (no markdown, newlines folded), so each sample is a line of
    its own tag (samples/1, samples/2, ...) with the facts first and the question, not the chat template.
    """
    lines = []
    for row in rows[:shown]:
        facts = [f"{k} {_fmt(row[k])}" for k in ("reward", "advantage", "task") if row.get(k) is not None]
        facts += [f"{k} {_fmt(v)}" for k, v in row.items() if k.startswith("reward/") and v is not None]
        question = " ".join(_clip(row.get("question") or row.get("prompt"), 400).split())
        answer = " ".join(_clip(row.get("response"), 600).split())
        lines.append(" · ".join(facts + [f"Q: {question}", f"A: {answer}"]))
    return lines


def render_samples_markdown(step: int, rows: list[dict], shown: int = SAMPLES_SHOWN) -> str:
    """A readable markdown rendering of the first ``shown`` samples (TensorBoard's and wandb's text panels).

    The question (the user's last turn) and the response are indented code blocks, so model output
    cannot break the layout; the full chat-templated prompt is in samples.jsonl.
    """
    parts = [f"**step {step}** · showing {min(shown, len(rows))} of {len(rows)} samples"]
    for i, row in enumerate(rows[:shown], start=1):
        facts = [f"**#{i}**"]
        for key in ("reward", "advantage", "task"):
            if row.get(key) is not None:
                facts.append(f"{key} **{_fmt(row[key])}**" if key == "reward" else f"{key} {_fmt(row[key])}")
        facts += [
            f"{k} {_fmt(v)}"
            for k, v in row.items()
            if k not in ("prompt", "question", "response", "reward", "advantage", "task") and v is not None
        ]
        parts.append("---\n" + " · ".join(facts))
        shown_text = {"question": row.get("question") or row.get("prompt"), "response": row.get("response")}
        for key, value in shown_text.items():
            body = "\n".join("    " + line for line in _clip(value).splitlines() or [""])
            parts.append(f"*{key}*\n\n{body}")
    return "\n\n".join(parts) + "\n"
