"""`prepare`: generate the built-in tasks' train/test files in PaddleNLP's layout, and `ensure_prepared`.

    prepare ppo-kk      ./ppo-kk/34567ppl/train.jsonl (3–7 people) and ./ppo-kk/5ppl/test.jsonl (5 people)
    prepare arithmetic  data/arithmetic/train.jsonl and data/arithmetic/test.jsonl
    prepare countdown   data/countdown/train.jsonl and data/countdown/test.jsonl
    prepare multiply    data/multiply/train.jsonl and data/multiply/test.jsonl (3-digit a x b, tool use)

The test split is drawn first (unique prompts), then the train split never reuses a test prompt and
keeps its own prompts unique while the task's problem space allows; when it runs out of new problems
(small spaces, e.g. one-digit arithmetic) it fills up with repeats and says so. Seeds are fixed, so
the same command writes byte-identical files.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ppokit.data.errors import DataError
from ppokit.tasks import TaskError, get

logger = logging.getLogger("ppokit.data")


@dataclass(frozen=True)
class Split:
    relpath: str  # under the output folder
    size: int
    seed: int
    difficulty: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    task: str
    out: str  # default output folder
    train: Split
    test: Split


LAYOUTS: dict[str, Layout] = {
    "ppo-kk": Layout(
        "knights_knaves",
        ".",
        train=Split("ppo-kk/34567ppl/train.jsonl", 5000, 1, {"people": "3-7"}),
        test=Split("ppo-kk/5ppl/test.jsonl", 500, 2, {"people": 5}),
    ),
    "arithmetic": Layout(
        "arithmetic",
        "data",
        train=Split("arithmetic/train.jsonl", 2000, 1),
        test=Split("arithmetic/test.jsonl", 30, 2),
    ),
    "countdown": Layout(
        "countdown",
        "data",
        train=Split("countdown/train.jsonl", 5000, 1),
        test=Split("countdown/test.jsonl", 200, 2),
    ),
    "multiply": Layout(  # multi-turn: needs the multiply tool (config/grpo_tools_argument.json)
        "multiply",
        "data",
        train=Split("multiply/train.jsonl", 2000, 1),
        test=Split("multiply/test.jsonl", 50, 2),
    ),
}
STALE_CHUNKS = 3  # generated chunks in a row without a new prompt = the problem space is used up


def _prompt_key(row: dict) -> str:
    return json.dumps(row["src"], ensure_ascii=False)


def draw(
    task_name: str, n: int, seed: int, difficulty: dict, exclude: set[str], repeats_ok: bool
) -> list[dict]:
    """`n` generated rows whose prompts avoid `exclude`; unique while new prompts keep coming."""
    task = get(task_name)
    rows: list[dict] = []
    seen = set(exclude)
    chunk, stale = 0, 0
    while len(rows) < n and stale < STALE_CHUNKS:
        batch = task.generate(max(n - len(rows), 64), seed * 100_003 + chunk, **difficulty)
        chunk += 1
        before = len(rows)
        for row in batch:
            key = _prompt_key(row)
            if key not in seen and len(rows) < n:
                seen.add(key)
                rows.append(row)
        stale = stale + 1 if len(rows) == before else 0
    if len(rows) < n and rows and repeats_ok:
        logger.warning(
            "%s: only %d distinct prompts at this difficulty outside the test split; the remaining %d rows repeat them",
            task_name,
            len(rows),
            n - len(rows),
        )
        while len(rows) < n:
            batch = task.generate(n, seed * 100_003 + chunk, **difficulty)
            chunk += 1
            rows.extend(r for r in batch if _prompt_key(r) not in exclude)
        rows = rows[:n]
    return rows


def write_jsonl(rows: list[dict], path: str | os.PathLike) -> None:
    """Write rows as JSON lines (UTF-8, "\\n"), atomically (a temp file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def prepare(
    name: str,
    out: str | os.PathLike | None = None,
    train_size: int | None = None,
    test_size: int | None = None,
    seed: int = 0,
    difficulty: dict | None = None,
    only_missing: bool = False,
) -> list[Path]:
    """Generate `name`'s train and test files under `out`; returns the paths written."""
    if name not in LAYOUTS:
        raise DataError(f"unknown dataset {name!r} to prepare; known: {', '.join(LAYOUTS)}")
    layout = LAYOUTS[name]
    out = Path(layout.out if out is None else out)
    train_n = layout.train.size if train_size is None else train_size
    test_n = layout.test.size if test_size is None else test_size
    if train_n < 1 or test_n < 0:
        raise DataError(f"prepare {name}: --train-size must be at least 1 and --test-size at least 0")
    extra = dict(difficulty or {})
    try:
        test = draw(
            layout.task,
            test_n,
            layout.test.seed + 1000 * seed,
            {**layout.test.difficulty, **extra},
            set(),
            False,
        )
        if len(test) < test_n:
            logger.warning(
                "%s: only %d distinct test prompts exist at this difficulty (asked for %d)",
                name,
                len(test),
                test_n,
            )
        exclude = {_prompt_key(r) for r in test}
        train = draw(
            layout.task,
            train_n,
            layout.train.seed + 1000 * seed,
            {**layout.train.difficulty, **extra},
            exclude,
            True,
        )
    except TaskError as err:
        raise DataError(f"prepare {name}: {err}") from err
    if not train:
        raise DataError(
            f"prepare {name}: every distinct prompt at this difficulty went to the test split ({len(test)}); "
            "lower --test-size or raise the difficulty"
        )
    written = []
    for split, rows in ((layout.train, train), (layout.test, test)):
        path = out / split.relpath
        if only_missing and path.exists():
            continue
        write_jsonl(rows, path)
        written.append(path)
    return written


def match_layout(path: str | os.PathLike) -> tuple[str, Path] | None:
    """(layout name, output folder) when `path` ends like a known generated file, else None."""
    parts = Path(path).parts
    for name, layout in LAYOUTS.items():
        for split in (layout.train, layout.test):
            rel = Path(split.relpath).parts
            if len(parts) >= len(rel) and tuple(parts[-len(rel) :]) == rel:
                return name, Path(*parts[: len(parts) - len(rel)]) if len(parts) > len(rel) else Path(".")
    return None


def ensure_prepared(path: str | os.PathLike) -> bool:
    """Generate `path` (and its sibling split) with the prepare defaults when it is missing and matches a
    known layout (…/ppo-kk/34567ppl/train.jsonl, …/ppo-kk/5ppl/test.jsonl, …/arithmetic/{train,test}.jsonl,
    …/countdown/{train,test}.jsonl). Returns True when it generated data; existing files are never touched."""
    if os.path.exists(path):
        return False
    found = match_layout(path)
    if found is None:
        return False
    name, out = found
    written = prepare(name, out, only_missing=True)
    logger.warning(
        "%s was missing: generated %s locally (`python -m ppokit.data prepare %s --out %s`)",
        path,
        ", ".join(str(p) for p in written),
        name,
        out,
    )
    return True
