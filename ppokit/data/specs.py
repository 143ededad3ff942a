"""Dataset specs: `train_datasets`-style path lists and the task-config JSON (`train_task_config`)."""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
import random
from collections import Counter
from fractions import Fraction

from ppokit.args.history import PADDLE_HUB_DATASETS
from ppokit.data.errors import DataError
from ppokit.data.prepare import LAYOUTS, ensure_prepared
from ppokit.data.readers import read_rows
from ppokit.data.records import row_to_record

logger = logging.getLogger("ppokit.data")
TASK_CONFIG_KEYS = ("tasks", "seed", "size")
REGISTERED = PADDLE_HUB_DATASETS
TASK_ENTRY_KEYS = ("name", "path", "weight", "task", "max_records", "prompt_key", "response_key")


def _parse_proportion(text: str, part: str, n: int) -> int:
    """PaddleNLP's proportion: a fraction (0.5, 1/2) of the rows, or "k/-1" for an absolute count k."""
    try:
        if text.endswith("/-1"):
            return int(text[:-3])
        value = Fraction(text)
    except (ValueError, ZeroDivisionError) as err:
        raise DataError(
            f"dataset {part!r}: proportion {text!r} must be a number, a/b, or k/-1 (a count)"
        ) from err
    if value <= 0:
        raise DataError(f"dataset {part!r}: proportion {text!r} must be positive")
    return max(1, round(value * n))


def _subsample(records: list[dict], count: int, seed: int = 0) -> list[dict]:
    """`count` records: a seeded sample in file order, or whole copies plus a sample when count > len."""
    n = len(records)
    whole, rest = divmod(count, n)
    picked = sorted(random.Random(seed).sample(range(n), rest))
    return records * whole + [records[i] for i in picked]


def split_spec(spec) -> list[tuple[str, str | None, str]]:
    """[(path, proportion or None, the part as written)] for a comma list in PaddleNLP's spellings. A value that
    is itself an existing path is that one path, commas and all (a folder named 'data,v2')."""
    if isinstance(spec, str) and "," in spec and os.path.exists(spec.strip()):
        return [(spec.strip(), None, spec.strip())]
    parts = spec if isinstance(spec, (list, tuple)) else str(spec or "").split(",")
    out = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if os.path.exists(part) or ":" not in part:
            out.append((part, None, part))
        elif "::" in part:  # "Jsonfile::path.jsonl"
            out.append((part.split("::", 1)[1], None, part))
        elif part.count(":") >= 2:  # "name:proportion:path"
            name, proportion, path = part.split(":", 2)
            logger.warning(
                "dataset %r: reading %s at proportion %s (PaddleNLP's name:proportion:path; the name is ignored)",
                part,
                path,
                proportion,
            )
            out.append((path, proportion, part))
        else:
            raise DataError(
                f"dataset {part!r}: PaddleNLP's registered datasets (name[:proportion]) are not available in "
                "ppokit; give a .jsonl, .json or .parquet path (or a saved datasets folder)"
            )
    if not out:
        raise DataError("no dataset given: the dataset list is empty")
    return out


def _missing(path: str) -> DataError:
    if path.split("/")[0].split(":")[0] in REGISTERED:
        return DataError(
            f"dataset {path!r} is one of PaddleNLP's registered datasets, which ppokit does not download; "
            "export it to a .jsonl file with 'src' (prompt) and 'tgt' (reference) fields and give that path"
        )
    known = ", ".join(s.relpath for layout in LAYOUTS.values() for s in (layout.train, layout.test))
    return DataError(
        f"dataset file not found: {path} (relative paths are read from {os.getcwd()}); ppokit generates "
        f"these layouts itself when missing: {known}"
    )


def load_with_formats(spec, prompt_key: str = "src", response_key: str = "tgt") -> tuple[list[dict], Counter]:
    """Records of every dataset in `spec` and a Counter of the row formats seen."""
    records: list[dict] = []
    formats: Counter = Counter()
    for path, proportion, part in split_spec(spec):
        if not os.path.exists(path) and not ensure_prepared(path):
            raise _missing(path)
        pairs = [row_to_record(row, where, prompt_key, response_key) for row, where in read_rows(path)]
        formats.update(kind for _, kind in pairs)
        found = [record for record, _ in pairs]
        if proportion is not None:
            found = _subsample(found, _parse_proportion(proportion, part, len(found)))
        records.extend(found)
    return records, formats


def load_datasets(spec, prompt_key: str = "src", response_key: str = "tgt") -> list[dict]:
    """Records from a path or comma-separated paths (`train_datasets`, `eval_datasets`, `ptx_datasets`).

    Also accepts PaddleNLP's `Jsonfile::path` and `name:proportion:path` (the name is ignored). A missing
    file with a known generated layout (ppo-kk/34567ppl/train.jsonl, …) is generated first.
    """
    records, _ = load_with_formats(spec, prompt_key, response_key)
    return records


def _suggest(key: str, known) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _read_task_config(path: str) -> dict:
    if not os.path.isfile(path):
        raise DataError(f"task config not found: {path}")
    with open(path, encoding="utf-8-sig") as fh:  # a leading byte-order mark is not part of the file
        text = fh.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        from ppokit.args.json_hints import json_habit

        habit = json_habit(text)
        if habit is not None:
            raise DataError(f"{path}:{habit[0]}:{habit[1]}: invalid JSON: {habit[2]}") from err
        raise DataError(f"{path}:{err.lineno}: invalid JSON: {err.msg} (column {err.colno})") from err
    if isinstance(data, list):
        data = {"tasks": data}
    if not isinstance(data, dict):
        raise DataError(f'{path}: a task config is an object {{"tasks": [...]}}, got {type(data).__name__}')
    for key in data:
        if key not in TASK_CONFIG_KEYS:
            raise DataError(
                f"{path}: unknown key {key!r}{_suggest(key, TASK_CONFIG_KEYS)}; known keys: {', '.join(TASK_CONFIG_KEYS)}"
            )
    if not isinstance(data.get("tasks"), list) or not data["tasks"]:
        raise DataError(f'{path}: \'tasks\' must be a non-empty list of {{"name", "path", "weight", ...}}')
    if not isinstance(data.get("seed", 0), int):
        raise DataError(f"{path}: 'seed' must be an integer, got {data['seed']!r}")
    size = data.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
        raise DataError(f"{path}: 'size' must be a positive integer or null, got {size!r}")
    return data


def _check_entry(entry, i: int, path: str) -> dict:
    where = f"{path}: tasks[{i}]"
    if not isinstance(entry, dict):
        raise DataError(
            f"{where} must be an object with 'path' (and 'name', 'weight', 'task', 'max_records')"
        )
    for key in entry:
        if key not in TASK_ENTRY_KEYS:
            raise DataError(
                f"{where}: unknown key {key!r}{_suggest(key, TASK_ENTRY_KEYS)}; known keys: {', '.join(TASK_ENTRY_KEYS)}"
            )
    if not isinstance(entry.get("path"), str) or not entry["path"].strip():
        raise DataError(f"{where}.path must be a dataset path (string)")
    weight = entry.get("weight", 1.0)
    if (
        isinstance(weight, bool)
        or not isinstance(weight, (int, float))
        or not weight > 0
        or math.isinf(weight)
    ):
        raise DataError(f"{where}.weight must be a positive number, got {weight!r}")
    cap = entry.get("max_records")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise DataError(f"{where}.max_records must be a positive integer or null, got {cap!r}")
    for key in ("name", "task", "prompt_key", "response_key"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            raise DataError(f"{where}.{key} must be a string, got {entry[key]!r}")
    return entry


def _resolve(data_path: str, config_path: str) -> str:
    """Relative paths are read from the current folder, else from the task config's folder."""
    if os.path.isabs(data_path) or os.path.exists(data_path):
        return data_path
    beside = os.path.join(os.path.dirname(os.path.abspath(config_path)), data_path)
    return beside if os.path.exists(beside) else data_path


def _load_entry(entry: dict, i: int, path: str, prompt_key: str, response_key: str) -> list[dict]:
    spec = ",".join(_resolve(p.strip(), path) for p in entry["path"].split(","))
    try:
        records = load_datasets(
            spec, entry.get("prompt_key", prompt_key), entry.get("response_key", response_key)
        )
    except DataError as err:
        raise DataError(f"{path}: tasks[{i}] ({entry.get('name') or entry['path']}): {err}") from err
    if entry.get("max_records"):
        records = records[: entry["max_records"]]
    if entry.get("task"):
        records = [{**r, "task": entry["task"]} for r in records]
    return records


def load_task_config(path: str, prompt_key: str = "src", response_key: str = "tgt") -> list[dict]:
    """Records mixed from the datasets listed in a task-config JSON (see docs/data.md).

    Each dataset gets `round(weight / sum(weights) * size)` records. Without `size`, size is the largest
    mix that repeats no record (min over datasets of len / fraction); a dataset smaller than its share is
    repeated (whole copies, then a seeded sample of the rest); a larger one is sampled without
    replacement. The mix is shuffled with `seed`.
    """
    data = _read_task_config(path)
    entries = [_check_entry(e, i, path) for i, e in enumerate(data["tasks"])]
    names = [e.get("name") or e["path"] for e in entries]
    dup = [n for n, c in Counter(names).items() if c > 1]
    if dup:
        raise DataError(f"{path}: task name {dup[0]!r} is used twice; give each entry a distinct 'name'")
    loaded = [_load_entry(e, i, path, prompt_key, response_key) for i, e in enumerate(entries)]
    total_w = sum(float(e.get("weight", 1.0)) for e in entries)
    fractions = [float(e.get("weight", 1.0)) / total_w for e in entries]
    size = data.get("size") or min(math.floor(len(recs) / f + 1e-9) for recs, f in zip(loaded, fractions))
    seed = data.get("seed", 0)
    mixed: list[dict] = []
    for i, (recs, frac) in enumerate(zip(loaded, fractions)):
        count = round(frac * size)
        if count == 0:
            logger.warning(
                "%s: tasks[%d] (%s) gets no records at weight %s and size %d",
                path,
                i,
                names[i],
                entries[i].get("weight", 1.0),
                size,
            )
            continue
        mixed.extend(_subsample(recs, count, seed + i))
    if not mixed:
        raise DataError(f"{path}: the mix is empty; raise 'size' or the weights")
    random.Random(seed).shuffle(mixed)
    return mixed
