"""Helpers for the tracking tests: VisualDL record files are read back with visualdl.LogReader."""

from __future__ import annotations

import json
from pathlib import Path


def vdl_files(logdir: Path) -> list[Path]:
    """VisualDL record files under a logging_dir (in the runs' folders), oldest first (VisualDL shows the last)."""
    return sorted(Path(logdir).rglob("vdlrecords*"), key=lambda p: p.name)


def read_vdl(path: Path):
    from visualdl import LogReader

    return LogReader(file_path=str(path))


def vdl_scalars(path: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) pairs of a scalar tag in a record file."""
    from ppokit.tracking.vdl import visualdl_tag

    return [(rec.id, rec.value) for rec in read_vdl(path).get_data("scalar", visualdl_tag(tag))]  # "0 reward and eval/reward/mean"


def jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def vdl_tags(path: Path, component: str) -> list[str]:
    """The tags of one component ("scalar", "text") in a record file, in the order they were first written."""
    prefix = str(path) + "/"
    return [key[len(prefix):].replace("%", "/") for key, kind in read_vdl(path).tags().items() if kind == component]
