"""The output folder belongs to one run: it may not be (or hold, or sit inside) a model folder the run reads,
and a lock file in it (`.ppokit-run.lock`: pid, host, start time) keeps a second run out while the first lives.

The lock is taken with O_CREAT|O_EXCL, so two runs started at the same instant cannot both win. A lock left by a
process that is gone (same host, pid no longer running) is stale: it is taken over with a note. A lock from
another host cannot be checked from here, so it stops the run with a sentence naming that host and pid.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from pathlib import Path

from ppokit.errors import PpokitError

logger = logging.getLogger("ppokit")

LOCK_FILE = ".ppokit-run.lock"
MODEL_KEYS = ("actor_model_name_or_path", "reference_model_name_or_path", "critic_model_name_or_path",
              "reward_model_name_or_path")


class OutputDirError(PpokitError):
    """output_dir cannot be used by this run (a model folder it reads, or another live run's folder)."""


def _overlaps(a: Path, b: Path) -> str | None:
    """How folder `a` (output_dir) and `b` (a model folder) overlap: 'is', 'is inside', 'contains', or None."""
    if a == b:
        return "is"
    if b in a.parents:
        return "is inside"
    if a in b.parents:
        return "contains"
    return None


def check_not_model_folder(args) -> None:
    """Refuse an output_dir that is, contains or is inside a local model folder the run reads: the final save
    and the checkpoints would overwrite (or prune) the weights the run started from."""
    out = Path(args.output_dir).expanduser().resolve()
    for key in MODEL_KEYS:
        value = getattr(args, key, None)
        if not value:
            continue
        model = Path(str(value)).expanduser()
        if not model.exists():  # an alias, a hub name or a .gguf file inside a package: nothing of it in output_dir
            continue
        model = model.resolve()
        folder = model if model.is_dir() else model.parent
        how = _overlaps(out, folder)
        if how:
            raise OutputDirError(
                f"output_dir {args.output_dir} {how} the model folder {value} ({key}); saving there would overwrite "
                "the weights this run reads: choose another output_dir")


# ------------------------------------------------------------------ the lock


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


class RunLock:
    """`output_dir/.ppokit-run.lock` held by this process; `release()` removes it (only if it is still ours)."""

    def __init__(self, output_dir: str | os.PathLike):
        self.path = Path(output_dir) / LOCK_FILE
        self.mine = {"pid": os.getpid(), "host": socket.gethostname(),
                     "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        self.held = False

    def acquire(self) -> RunLock:
        for _ in range(3):  # a stale lock is removed, then the exclusive create is tried again
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._refuse_or_clear()
                continue
            except OSError as exc:
                raise OutputDirError(f"output_dir {self.path.parent} is not writable ({exc.strerror or exc}); choose "
                                     "another output_dir or fix its permissions") from None
            with os.fdopen(fd, "w") as fh:
                json.dump(self.mine, fh)
            self.held = True
            return self
        raise OutputDirError(f"output_dir {self.path.parent}: cannot take the lock {self.path} (another run keeps "
                             "taking it); make sure only one run uses this output_dir")

    def _refuse_or_clear(self) -> None:
        other = _read(self.path)
        pid, host = other.get("pid"), other.get("host")
        if not other:  # being written by a run that has just created it, or damaged: look again
            time.sleep(0.2)
            other = _read(self.path)
            pid, host = other.get("pid"), other.get("host")
        if isinstance(pid, int) and host == self.mine["host"] and not _alive(pid):
            logger.warning("output_dir %s: the lock of run pid %d (started %s) is stale, that process is gone; taking "
                           "it over", self.path.parent, pid, other.get("started", "?"))
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        who = f"process {pid} on {host} (started {other.get('started', '?')})" if pid else "another process"
        raise OutputDirError(
            f"output_dir {self.path.parent} is in use by another run: {who} holds {self.path}; wait for it to "
            f"finish, choose another output_dir, or delete {self.path.name} if that run is really gone")

    def release(self) -> None:
        if self.held and _read(self.path).get("pid") == self.mine["pid"]:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.held = False
