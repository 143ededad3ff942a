"""Where metrics go besides the JSONL files: VisualDL (default), TensorBoard and wandb when installed.

Each backend is a plain class satisfying the ``Backend`` protocol; the Tracker hands them finite
numbers only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Protocol

KNOWN_BACKENDS = ("visualdl", "tensorboard", "wandb")


def note(message: str) -> None:
    """A one-line note to the user on stderr (visible in consoles and notebooks alike)."""
    print(f"ppokit: {message}", file=sys.stderr)


class Backend(Protocol):
    name: str

    def scalars(self, step: int, metrics: dict[str, float]) -> None: ...

    def text(self, step: int, tag: str, text: str) -> None: ...

    def hparams(self, hparams: dict[str, int | float | str], metric_names: list[str]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def resolve_report_to(report_to: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """Normalise PaddleNLP's ``report_to``: None -> ["visualdl"], "all" -> every installed one, "none" -> []."""
    if report_to is None:
        return ["visualdl"]
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    names = [n.strip().lower() for n in names if n and n.strip()]
    if "none" in names:
        return []
    if "all" in names:
        return [n for n in KNOWN_BACKENDS if _installed(n)]
    unknown = [n for n in names if n not in KNOWN_BACKENDS]
    if unknown:
        raise ValueError(
            f"report_to has {', '.join(repr(n) for n in unknown)}, which ppokit does not know; "
            f"use any of {', '.join(KNOWN_BACKENDS)}, or 'all' or 'none'."
        )
    return list(dict.fromkeys(names))


def _installed(name: str) -> bool:
    module = {"visualdl": "visualdl", "tensorboard": "tensorboard", "wandb": "wandb"}[name]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# What a person looks at first: the reward, then evaluation, lengths and KL; everything else after, as logged.
FIRST_TAGS = ("reward/mean", "reward/std", "reward/", "eval/", "response_length/", "actor/kl", "actor/entropy")
# VisualDL sorts its tag groups (the text before the first "/") by name and opens only the first, "actor";
# as in PaddleNLP's own logs, every scalar goes under train/, where charts keep the order they were first written.
VISUALDL_PREFIX = "train/"


def tag_rank(tag: str) -> int:
    """Position of a metric's group in VisualDL: reward/mean first (VisualDL opens only the first group)."""
    return next((i for i, head in enumerate(FIRST_TAGS) if tag == head or (head.endswith("/") and
                 tag.startswith(head))), len(FIRST_TAGS))


class VisualDLBackend:
    """Scalars, text and hparams through ``visualdl.LogWriter`` into one new record file."""

    name = "visualdl"

    def __init__(self, logdir: Path, display_name: str = ""):
        from visualdl import LogWriter

        # VisualDL shows the newest file of a directory (by name); nanoseconds keep a resumed run's
        # file after its predecessor even within the same second.
        self.writer = LogWriter(
            logdir=str(logdir), file_name=f"vdlrecords.{time.time_ns():019d}.log", display_name=display_name
        )
        self.file = self.writer.file_name

    def scalars(self, step: int, metrics: dict[str, float]) -> None:
        for tag in sorted(metrics, key=tag_rank):  # reward/mean is the first chart of the first group
            self.writer.add_scalar(tag=VISUALDL_PREFIX + tag, value=metrics[tag], step=step)

    def text(self, step: int, tag: str, text: str) -> None:
        self.writer.add_text(tag=tag, text_string=text, step=step)

    def hparams(self, hparams: dict[str, int | float | str], metric_names: list[str]) -> None:
        self.writer.add_hparams(hparams_dict=hparams, metrics_list=[VISUALDL_PREFIX + m for m in metric_names])

    def carry_over(self, previous_file: str, max_step: int) -> int:
        """Copy scalars and texts with step <= max_step from an earlier run's file; returns records copied.

        VisualDL displays only the newest file of a directory, so a resumed run copies the history
        it continues into its own file. Records are read one by one with VisualDL's RecordReader,
        so a file cut short by a crash yields everything before the damaged record.
        """
        from google.protobuf.message import DecodeError
        from visualdl.proto import record_pb2
        from visualdl.reader.record_reader import RecordReader

        copied = 0
        for raw in RecordReader(filepath=previous_file).get_all():
            record = record_pb2.Record()
            try:
                record.ParseFromString(raw)
            except DecodeError:
                break
            for value in record.values:
                kind = value.WhichOneof("one_value")
                if value.id > max_step or kind not in ("value", "text"):
                    continue
                if kind == "value":
                    self.writer.add_scalar(
                        tag=value.tag, value=value.value, step=value.id, walltime=value.timestamp
                    )
                else:
                    text = value.text.encoded_text_string
                    self.writer.add_text(
                        tag=value.tag, text_string=text, step=value.id, walltime=value.timestamp
                    )
                copied += 1
        return copied

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class TensorBoardBackend:
    """Scalars and text through ``torch.utils.tensorboard.SummaryWriter`` (needs the tensorboard package)."""

    name = "tensorboard"

    def __init__(self, logdir: Path, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir), purge_step=purge_step)

    def scalars(self, step: int, metrics: dict[str, float]) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)

    def text(self, step: int, tag: str, text: str) -> None:
        self.writer.add_text(tag, text, step)

    def hparams(self, hparams: dict[str, int | float | str], metric_names: list[str]) -> None:
        rows = "\n".join(f"| {k} | {v} |" for k, v in hparams.items())
        self.writer.add_text("hparams", "| argument | value |\n|---|---|\n" + rows, 0)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbBackend:
    """Scalars, text and config through an installed ``wandb`` (project from $WANDB_PROJECT, default ppokit)."""

    name = "wandb"

    def __init__(self, wandb_module, output_dir: Path, run_name: str | None, resuming: bool):
        self.wandb = wandb_module
        self.run = wandb_module.init(
            project=os.environ.get("WANDB_PROJECT", "ppokit"),
            name=run_name,
            dir=str(output_dir),
            resume="allow" if resuming else None,
        )

    def scalars(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def text(self, step: int, tag: str, text: str) -> None:
        self.run.log({tag: self.wandb.Html(f"<pre>{_escape(text)}</pre>")}, step=step)

    def hparams(self, hparams: dict[str, int | float | str], metric_names: list[str]) -> None:
        self.run.config.update(hparams, allow_val_change=True)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.run.finish()


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def open_backends(
    names: list[str],
    logdir: Path,
    output_dir: Path,
    run_name: str | None,
    resume_step: int | None,
) -> list[Backend]:
    """Start each named backend; one that is not installed is skipped with a one-line note."""
    backends: list[Backend] = []
    for name in names:
        if name == "visualdl":
            try:
                # the run is named by its output folder ("grpo"), not by the log folder's absolute path
                backends.append(VisualDLBackend(logdir, display_name=run_name or output_dir.name))
            except ImportError as exc:
                note(
                    f"VisualDL could not be imported ({exc}); reinstall it with pip install visualdl. Skipping it."
                )
        elif name == "tensorboard":
            try:
                purge = None if resume_step is None else resume_step + 1
                backends.append(TensorBoardBackend(logdir, purge_step=purge))
            except ImportError:
                note(
                    "report_to asks for tensorboard, which is not installed (pip install tensorboard); skipping it."
                )
        elif name == "wandb":
            try:
                import wandb
            except ImportError:
                note("report_to asks for wandb, which is not installed (pip install wandb); skipping it.")
                continue
            backends.append(WandbBackend(wandb, output_dir, run_name, resuming=resume_step is not None))
    return backends


def hparams_for_backends(hparams: dict) -> dict[str, int | float | str]:
    """The scalar-valued entries of a dict (bools as text, None/lists/dicts dropped), for hparams panels."""
    out: dict[str, int | float | str] = {}
    for key, value in hparams.items():
        if isinstance(value, bool):
            out[str(key)] = str(value)
        elif isinstance(value, (int, float, str)):
            out[str(key)] = value
        elif getattr(value, "value", None) is not None and isinstance(value.value, (int, float, str)):
            out[str(key)] = value.value  # enums
    return out


def dump_args(hparams: dict) -> str:
    """args.json text: every argument, nested values kept, non-JSON values as text."""
    from ppokit.tracking.jsonl import to_jsonable

    return json.dumps(to_jsonable(hparams), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
