"""Row readers: .jsonl, .json (a list of rows, {"data": [...]}, or JSON lines), .parquet, and folders
written by `datasets.Dataset.save_to_disk`. Each yields (row: dict, where: str): `where` is
"path:LINE" for JSON lines and "path#ROW" (1-based) for the other formats.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from ppokit.data.errors import DataError

SUFFIXES = (".jsonl", ".json", ".parquet")


def read_rows(path: str) -> list[tuple[dict, str]]:
    """All rows of one dataset file or folder; an empty file is an error."""
    if os.path.isdir(path):
        rows = list(_read_hf_folder(path))
    elif path.endswith(".jsonl"):
        rows = list(_read_jsonl(path))
    elif path.endswith(".json"):
        rows = _read_json(path)
    elif path.endswith(".parquet"):
        rows = list(_read_parquet(path))
    else:
        raise DataError(
            f"{path}: unsupported dataset file type; use .jsonl, .json, .parquet or a folder written by "
            "datasets' save_to_disk"
        )
    if not rows:
        raise DataError(f"{path}: the dataset has no rows")
    return rows


def _check_row(row, where: str) -> dict:
    if not isinstance(row, dict):
        raise DataError(
            f"{where}: expected a JSON object (a row with fields such as 'src'), got {type(row).__name__}"
        )
    return row


def _open_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8-sig") as fh:  # a leading byte-order mark is not part of the data
            return fh.read()
    except UnicodeDecodeError as err:
        line = err.object.count(b"\n", 0, err.start) + 1
        column = err.start - (err.object.rfind(b"\n", 0, err.start) + 1) + 1
        raise DataError(f"{path}:{line}: the file is not UTF-8 text ({err.reason} at byte {err.start}, column "
                        f"{column}); re-save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from err


def _read_jsonl(path: str, text: str | None = None) -> Iterator[tuple[dict, str]]:
    text = _open_text(path) if text is None else text
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            from ppokit.args.json_hints import json_habit

            habit = json_habit(line)
            if habit is not None:
                raise DataError(f"{where}:{habit[1]}: invalid JSON: {habit[2]}") from err
            raise DataError(f"{where}: invalid JSON: {err.msg} (column {err.colno})") from err
        yield _check_row(row, where), where


def _read_json(path: str) -> list[tuple[dict, str]]:
    text = _open_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # JSON lines in a .json file (datasets' "json" loader reads these too)
            return list(_read_jsonl(path, text))
        from ppokit.args.json_hints import json_habit

        habit = json_habit(text)
        if habit is not None:
            raise DataError(f"{path}:{habit[0]}:{habit[1]}: invalid JSON: {habit[2]}") from err
        raise DataError(f"{path}:{err.lineno}: invalid JSON: {err.msg} (column {err.colno})") from err
    if isinstance(data, dict) and isinstance(data.get("tasks"), list):
        raise DataError(
            f"{path}: this is a task config (it has 'tasks'), not a dataset; give it as "
            "train_task_config / eval_task_config / ptx_task_config"
        )
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    elif isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise DataError(f'{path}: expected a list of rows or {{"data": [...]}}, got {type(data).__name__}')
    return [(_check_row(row, f"{path}#{i}"), f"{path}#{i}") for i, row in enumerate(data, start=1)]


def _read_parquet(path: str) -> Iterator[tuple[dict, str]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: cannot read the parquet file: {err}") from err
    for i, row in enumerate(table.to_pylist(), start=1):
        yield row, f"{path}#{i}"


def _read_hf_folder(path: str) -> Iterator[tuple[dict, str]]:
    if not any(
        os.path.exists(os.path.join(path, f))
        for f in ("dataset_info.json", "dataset_dict.json", "state.json")
    ):
        raise DataError(
            f"{path}: a folder must be one written by datasets' save_to_disk (no dataset_info.json or "
            "dataset_dict.json in it); give a .jsonl, .json or .parquet file instead"
        )
    import datasets

    data = datasets.load_from_disk(path)
    if isinstance(data, datasets.DatasetDict):
        splits = list(data)
        if "train" in data:
            data = data["train"]
        elif len(splits) == 1:
            data = data[splits[0]]
        else:
            raise DataError(
                f"{path}: the saved DatasetDict has splits {splits} and none is 'train'; save one split"
            )
    for i, row in enumerate(data, start=1):
        yield row, f"{path}#{i}"
