"""Every path a command will write or read, checked before anything heavy starts (models loading, uvicorn
binding), each problem one sentence naming the key, the path and what is wrong: missing, a file where a folder is
expected (or the reverse), a read-only filesystem, no permission. Without it such a path is first touched deep
inside a library (VisualDL's makedirs, uvicorn's SSL context) after minutes of loading, as a traceback.

A list key (train_datasets split at ',', tools at ';') can cut a path that holds its separator: when the part does
not exist but the path the whole value names does, the sentence names the separator.

    check_paths([PathUse("logging_dir", "vdl_log", WRITE_DIR), PathUse("--ssl-certfile", "cert.pem", READ_FILE)])

The training run's list is `ppokit.training.run_paths`; the reward server's is in `ppokit.rewards.cli`. This
module imports nothing heavy (the server checks before importing uvicorn's app).
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ppokit.errors import PpokitError

WRITE_DIR, WRITE_FILE = "write_dir", "write_file"  # a folder the command creates or writes into; a file it writes
READ_FILE, READ_DIR, READ_ANY = "read_file", "read_dir", "read_any"  # what it reads: a file, a folder, either


class PathError(PpokitError):
    """A path the user gave cannot be used as the command needs it; the message has one sentence per path."""


@dataclass(frozen=True)
class PathUse:
    """One path a command will use. `whole`/`sep`: the list value `path` was split from and its separator
    (`whole` being the path the unsplit value would name), so a cut path is reported as such."""

    key: str
    path: str
    kind: str
    whole: str | None = None
    sep: str | None = None
    sep_means: str = ""  # e.g. "between dataset files"
    missing: str = ""  # the sentence for a missing path, when its kind has a better one (a model: how to get it)


def check_paths(uses: Iterable[PathUse]) -> None:
    """Raise PathError listing every problem of `uses` (one sentence each); return when there is none."""
    problems, cuts = [], set()
    for use in uses:
        sentence = path_problem(use)
        if sentence and use.whole and use.sep and os.path.exists(os.path.expanduser(use.whole)):
            if (use.key, use.whole) in cuts:
                continue  # the other pieces of one cut path: said once
            cuts.add((use.key, use.whole))
        if sentence:
            problems.append(sentence)
    if problems:
        raise PathError("\n".join(problems))


def joined_path(items: list[str], i: int, sep: str, to_path=lambda text: text) -> str | None:
    """The existing path that items[j..k] (j <= i <= k, more than one) joined by `sep` name, when splitting a list
    value at `sep` cut a path holding it; `to_path` turns a joined text into its path (e.g. 'file.py:fn' -> the
    file). None when no such path exists."""
    for j in range(i, -1, -1):
        for k in range(i, len(items)):
            if k > j and (path := to_path(sep.join(items[j:k + 1]))) and os.path.exists(os.path.expanduser(path)):
                return path
    return None


def path_problem(use: PathUse) -> str | None:
    """The sentence for what is wrong with `use`, or None."""
    path = Path(os.path.expanduser(use.path))
    if use.kind == WRITE_DIR:
        what = _write_dir_problem(path)
    elif use.kind == WRITE_FILE:
        what = _write_file_problem(path)
    else:
        what = _read_problem(path, use.kind)
        if what == "does not exist" and use.whole and use.sep and os.path.exists(os.path.expanduser(use.whole)):
            return (f"{use.key}: {use.path!r} does not exist: the value was split at {use.sep!r} (the separator "
                    f"{use.sep_means or 'between its items'}), and {use.whole!r}, the path with the {use.sep!r} in "
                    f"it, exists; a path holding {use.sep!r} cannot be named in {use.key}: rename it, or link it "
                    "under a name without it")
        if what == "does not exist" and use.missing:
            return f"{use.key}: {use.missing}"
        if what == "does not exist" and not path.is_absolute():
            what += f" (relative paths are read from {os.getcwd()})"
    return f"{use.key}: {use.path} {what}" if what else None


def _write_dir_problem(path: Path) -> str | None:
    if path.exists():
        return "is a file, not a folder" if not path.is_dir() else _probe(path)
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot be created: {parent} is a file, not a folder"
    reason = _probe(parent)
    return f"cannot be created: {parent} {reason}" if reason else None


def _write_file_problem(path: Path) -> str | None:
    if path.is_dir():
        return "is a folder, not a file"
    if not path.exists():
        folder = _write_dir_problem(path.parent)
        return f"cannot be written: {path.parent} {folder}" if folder else None
    try:
        with open(path, "a"):  # appending nothing changes nothing
            return None
    except OSError as exc:
        return _reason(exc)


def _read_problem(path: Path, kind: str) -> str | None:
    if not path.exists():
        return "is a broken link" if path.is_symlink() else "does not exist"
    if kind == READ_FILE and path.is_dir():
        return "is a folder, not a file"
    if kind == READ_DIR and not path.is_dir():
        return "is a file, not a folder"
    try:
        if path.is_dir():
            os.listdir(path)
        else:
            with open(path, "rb"):
                pass
    except OSError as exc:
        return _reason(exc)
    return None


def _probe(folder: Path) -> str | None:
    """Why nothing can be written in `folder` (a real write, as root too), or None."""
    try:
        handle, name = tempfile.mkstemp(prefix=".ppokit-write-test-", dir=folder)
    except OSError as exc:
        return _reason(exc)
    os.close(handle)
    os.unlink(name)
    return None


def _reason(exc: OSError) -> str:
    if exc.errno == errno.EROFS:
        return "is on a read-only filesystem"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be used: no permission"
    if exc.errno == errno.ENOSPC:
        return "cannot be written: the disk is full"
    if exc.errno == errno.ENOTDIR:
        return "cannot be used: a part of it is a file, not a folder"
    return f"cannot be used ({exc.strerror or exc})"
