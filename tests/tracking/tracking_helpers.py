"""Helpers for the tracking tests: VisualDL record files are read back with visualdl.LogReader."""

from __future__ import annotations

import json
from pathlib import Path


def vdl_files(logdir: Path) -> list[Path]:
    """VisualDL record files in a directory, oldest first (VisualDL shows the last one)."""
    return sorted(p for p in Path(logdir).iterdir() if "vdlrecords" in p.name)


def read_vdl(path: Path):
    from visualdl import LogReader

    return LogReader(file_path=str(path))


def vdl_scalars(path: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) pairs of a scalar tag in a record file."""
    return [(rec.id, rec.value) for rec in read_vdl(path).get_data("scalar", "train/" + tag)]  # VisualDL: train/*


def jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
