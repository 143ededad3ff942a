"""Who may write a run's records in output_dir: nothing a user starts erases another run's files unasked.

A run's records are its results: `metrics.jsonl`, `samples.jsonl`, its `checkpoint-<step>` folders and its final
model. Before the first write of a Session (its first `step()`, `evaluate()` or `train()`), `claim_output_dir`
looks at output_dir:
  - a live run's lock (`.ppokit-run.lock` of another process that is still running) stops every entry point:
    that run is writing these files right now;
  - records of an earlier run stop a Session that starts from step 0, with a sentence naming the choices
    (`Session.resume(output_dir)`, another output_dir, or `overwrite_output_dir: true`), unless the Session is
    a resume of that run (it continues the files) or `overwrite_output_dir` is set (they are deleted first:
    PaddleNLP's meaning of the key);
  - `resume_from_checkpoint: auto` with no checkpoint at all continues an interrupted run that never saved one:
    its rows are re-made from step 0, so they are replaced (with a note). A finished run is never replaced so.
VisualDL curves live in logging_dir, outside output_dir: a new run always gets a folder of its own there.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
from pathlib import Path

from ppokit.checkpoint.files import complete_checkpoints, is_auto
from ppokit.checkpoint.lock import LOCK_FILE, OutputDirError, _alive, _read
from ppokit.engine import all_reduce_sum, barrier, rank, world_size

logger = logging.getLogger("ppokit")

RECORD_FILES = ("metrics.jsonl", "samples.jsonl")
TRACKING_STATE = "tracking_state.json"
LEFTOVER_GLOBS = ("checkpoint-*", ".tmp-checkpoint-*", ".old-checkpoint-*", "abandoned")


class EarlierRunError(OutputDirError):
    """output_dir holds an earlier run's records and this Session would start over in it."""


def live_lock_owner(output_dir: str | os.PathLike) -> dict | None:
    """The lock's content when another process that is still running holds output_dir's lock; None when the
    folder is free (no lock, our own lock, or a stale lock of a process that is gone on this host). Rank 0 asks:
    the lock of a run with several processes is rank 0's."""
    other = _read(Path(output_dir) / LOCK_FILE)
    pid, host = other.get("pid"), other.get("host")
    if not (Path(output_dir) / LOCK_FILE).exists():
        return None
    if pid == os.getpid() and host == socket.gethostname():
        return None
    if isinstance(pid, int) and host == socket.gethostname() and not _alive(pid):
        return None
    return other or {"pid": None}


def check_no_live_run(output_dir: str | os.PathLike, doing: str) -> None:
    """Stop `doing` (e.g. "step()") when another live process holds output_dir's run lock."""
    other = live_lock_owner(output_dir)
    if other is None:
        return
    who = (f"process {other['pid']} on {other.get('host')} (started {other.get('started', '?')})" if other.get("pid")
           else "another process")
    raise OutputDirError(
        f"output_dir {output_dir} is in use by a run that is still training: {who} holds "
        f"{Path(output_dir) / LOCK_FILE}; {doing} would write into its metrics.jsonl and samples.jsonl. Wait for "
        "it to finish, or give this Session another output_dir (Session.from_json(..., output_dir='...')); delete "
        f"{LOCK_FILE} only if that run is really gone")


def earlier_records(output_dir: str | os.PathLike) -> list[str]:
    """What of an earlier run output_dir holds: non-empty metrics/samples files, complete checkpoints, a final
    model. Empty list: nothing a new run would destroy."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [name for name in RECORD_FILES if (root / name).is_file() and (root / name).stat().st_size > 0]
    found += [p.name for p in complete_checkpoints(root)]
    if (root / "config.json").is_file() and any(root.glob("*.safetensors")):
        found.append("a final model (config.json, *.safetensors)")
    return found


def finished(output_dir: Path) -> bool:
    """Whether the run in output_dir ended (its tracker was closed, or it saved its final model)."""
    try:
        state = json.loads((output_dir / TRACKING_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = {}
    closed = isinstance(state, dict) and state.get("wall_s") is not None
    return closed or (output_dir / "config.json").is_file()


def refusal(output_dir: Path, found: list[str], doing: str) -> EarlierRunError:
    return EarlierRunError(
        f"output_dir {output_dir} holds an earlier run ({', '.join(found)}) and {doing} would start a new run over "
        f"it from step 0, replacing its records. Continue that run with Session.resume('{output_dir}') (or "
        "--resume_from_checkpoint auto), give this run another output_dir, or set overwrite_output_dir: true "
        "(--overwrite_output_dir true) to delete the earlier run's records and start over")


def delete_earlier_run(output_dir: Path, found: list[str], why: str) -> None:
    """Delete an earlier run's records and checkpoints from output_dir (rank 0; the caller synchronises).
    The final model's files stay until this run saves its own (it replaces them then)."""
    for name in (*RECORD_FILES, TRACKING_STATE):
        (output_dir / name).unlink(missing_ok=True)
    for pattern in LEFTOVER_GLOBS:
        for path in output_dir.glob(pattern):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    logger.warning("%s: deleted %s of an earlier run in %s", why, ", ".join(found), output_dir)


def decide(args, resuming: bool, doing: str) -> None:
    """Rank 0's part of `claim_output_dir` (see the module docstring)."""
    root = Path(args.output_dir)
    check_no_live_run(root, doing)
    if resuming:
        return
    found = earlier_records(root)
    if not found:
        return
    if args.overwrite_output_dir:
        delete_earlier_run(root, found, "overwrite_output_dir")
    elif is_auto(args.resume_from_checkpoint) and not complete_checkpoints(root) and not finished(root):
        delete_earlier_run(root, found, "resume_from_checkpoint=auto found no checkpoint of the interrupted run, so "
                                        "it starts from step 0 and")
    else:
        raise refusal(root, found, doing)


def claim_output_dir(args, *, resuming: bool, doing: str) -> None:
    """Before a Session's first write into output_dir: refuse a live run's folder and an earlier run's records
    (unless resuming it or `overwrite_output_dir`). Every rank calls it; rank 0 decides and all agree."""
    problem = None
    if rank() == 0:
        try:
            decide(args, resuming, doing)
        except OutputDirError as exc:
            problem = exc
    if world_size() > 1:
        refused = all_reduce_sum(float(problem is not None))[0]
        if refused and problem is None:
            raise OutputDirError(f"output_dir {args.output_dir} cannot be used by {doing} (rank 0 says why)")
        barrier()
    if problem is not None:
        raise problem


def refuse_before_loading(args, doing: str = "training") -> None:
    """What `train()` would refuse once the models are loaded (`decide`), said before they load: a live run's
    folder, or an earlier run's records that this fresh run would start over (not a resume, not
    overwrite_output_dir, not `auto` continuing an interrupted run). Changes nothing on disk."""
    root = Path(args.output_dir)
    check_no_live_run(root, doing)
    spec = args.resume_from_checkpoint
    resuming = spec not in (None, False, "") and not (is_auto(spec) and not complete_checkpoints(root))
    if resuming or args.overwrite_output_dir:
        return
    found = earlier_records(root)
    if found and not (is_auto(spec) and not finished(root)):
        raise refusal(root, found, doing)


def open_tracker(session):
    """The Session's tracker, opened at its first write: a live run's folder, or an earlier run's records, are
    refused (not erased)."""
    from ppokit.tracking import Tracker

    args = session.args
    claim_output_dir(args, resuming=session.resume_step is not None, doing="this Session's first write")
    tracker = Tracker(replace=True,  # claim_output_dir decided: nothing of an earlier run is left unasked
                      output_dir=args.output_dir, logging_dir=args.logging_dir, report_to=args.report_to,
                      enabled=session.learner.dist.rank == 0, run_name=args.run_name, resume_step=session.resume_step)
    tracker.log_hparams(args, plan=session.plan)  # the model: args_info.json gets the defaults
    return tracker
