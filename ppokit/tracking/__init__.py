"""Tracking: metrics/samples/arguments to JSONL and VisualDL, console progress, and the HTML report.

    with Tracker("output", logging_dir="vdl_log") as t:
        t.log_hparams(args)
        t.log(1, {"reward/mean": 0.4, "reward/std": 0.2, "actor/kl": 0.001})
        t.log_samples(1, [{"prompt": "...", "response": "...", "reward": 1.0}])

Watch with ``visualdl --logdir vdl_log --component_tabs scalar text hyper_parameters`` (each run is a folder
of vdl_log; the tab list makes VisualDL open on the charts); write a report with
``python -m ppokit.tracking.report output``.

May import: visualdl/tensorboard/wandb (optional); no other ppokit room.
"""

from ppokit.tracking.backends import resolve_report_to
from ppokit.tracking.jsonl import JsonlContents, read_jsonl
from ppokit.tracking.progress import ConsoleProgress, format_summary
from ppokit.tracking.tracker import Tracker, render_samples_markdown

# The report is imported when asked for: `python -m ppokit.tracking.report` then runs it once, as __main__,
# instead of finding it imported already by this package (runpy's "found in sys.modules" RuntimeWarning).
_REPORT_NAMES = ("ReportError", "build_report")


def __getattr__(name: str):
    if name in _REPORT_NAMES:
        from ppokit.tracking import report

        return getattr(report, name)
    raise AttributeError(f"module 'ppokit.tracking' has no attribute {name!r}")


def read_metrics(output_dir) -> list[dict]:
    """The metrics rows of a run (one per logged call, in order); an incomplete last line is skipped."""
    from pathlib import Path

    return read_jsonl(Path(output_dir) / "metrics.jsonl").rows


__all__ = [
    "ConsoleProgress",
    "JsonlContents",
    "ReportError",
    "Tracker",
    "build_report",
    "format_summary",
    "read_jsonl",
    "read_metrics",
    "render_samples_markdown",
    "resolve_report_to",
]
