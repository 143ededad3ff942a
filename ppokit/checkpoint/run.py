"""A training run's frame: the output folder's checks and lock, resume, preemption, and the final save.

`guarded_run(session)` (used by `Session.train`, which gets its `Preemption` to check between steps) around the
loop:
  - refuses an output_dir that is/contains/is inside a model folder the run reads, and takes the run lock
    (`ppokit.checkpoint.lock`), held until the run ends;
  - prepares the run (`prepare_run`: writable output_dir with room for a checkpoint, resume);
  - SIGTERM (SLURM, Kubernetes, spot instances) lets the current step finish, then writes a checkpoint
    atomically and stops with `Preempted` (exit 143); a second SIGTERM stops at once (the last periodic
    checkpoint stays the newest); `--resume_from_checkpoint auto` continues from it (`ppokit.checkpoint.signals`,
    the rule for every mode);
  - a non-finite loss (`FloatingPointError` from the backward contract) becomes one sentence naming the step and
    the last finite checkpoint (exit 2).
`save_final` writes the final HF model into output_dir through a temporary folder (weights first, config.json
last), after the finiteness check; a full disk leaves no config.json without weights.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from ppokit.checkpoint.claim import claim_output_dir
from ppokit.checkpoint.files import CheckpointError, complete_checkpoints, is_rank0, last_checkpoint_name
from ppokit.checkpoint.lock import OutputDirError, RunLock, check_not_model_folder
from ppokit.checkpoint.resume import resume_into
from ppokit.checkpoint.safety import (
    NonFiniteWeightsError,
    after_divergence,
    check_finite,
    disk_full,
    human_bytes,
    is_disk_full,
)
from ppokit.checkpoint.save import checkpoint_bytes
from ppokit.checkpoint.signals import Preempted, Preemption, where_to_continue
from ppokit.engine import all_reduce_sum, barrier, world_size
from ppokit.models.folders import save_hf

logger = logging.getLogger("ppokit")

FINAL_TMP = ".tmp-final-model"


# ------------------------------------------------------------------ the run's frame


def take_lock(session) -> RunLock | None:
    """Rank 0 checks output_dir (not a model folder, writable, room for a checkpoint) and takes its lock; every
    rank learns whether it could (a refusal stops them all)."""
    args = session.args
    lock, refusal = None, None
    if is_rank0():
        try:
            check_not_model_folder(args)
            check_output_dir(args.output_dir, checkpoint_bytes(session))
            lock = RunLock(args.output_dir).acquire()
        except (OutputDirError, CheckpointError) as exc:
            refusal = exc
    if world_size() > 1 and all_reduce_sum(float(refusal is not None))[0] and refusal is None:
        raise OutputDirError(f"output_dir {args.output_dir} cannot be used (rank 0 says why)")
    if refusal is not None:
        raise refusal
    return lock


@contextlib.contextmanager
def guarded_run(session):
    """The frame of `Session.train` (see the module docstring)."""
    lock = take_lock(session)
    preemption = Preemption(session.args.output_dir)
    try:
        prepare_run(session)
        preemption.install()
        yield preemption  # the Trainer checks it between steps (Trainer.between_steps)
    except FloatingPointError as exc:
        last = last_checkpoint_name(Path(session.args.output_dir))
        raise NonFiniteWeightsError(f"step {session.global_step + 1} stopped: {exc} The weights may be damaged, "
                                    f"so nothing more is saved; {after_divergence(last)}") from None
    finally:
        preemption.uninstall()
        if lock is not None:
            lock.release()


def save_final(session) -> Path | None:
    """The final HF model in output_dir (rank 0 writes; every rank calls it): checked finite, written into a
    temporary folder, then moved in with config.json last, so no config.json ever stands without its weights."""
    out = Path(session.args.output_dir)
    check_finite({"actor": session.model}, session.global_step, "the final model", last_checkpoint_name(out))
    tmp = out / FINAL_TMP
    try:
        if is_rank0():
            shutil.rmtree(tmp, ignore_errors=True)
        save_hf(session.model, session.tokenizer, tmp)
        if is_rank0():
            names = sorted(p.name for p in tmp.iterdir())
            for name in sorted(names, key=lambda n: n == "config.json"):  # config.json last
                os.replace(tmp / name, out / name)
            shutil.rmtree(tmp, ignore_errors=True)
    except Exception as exc:
        if is_disk_full(exc, out, checkpoint_bytes(session)):
            raise disk_full("the final model", out, checkpoint_bytes(session), tmp) from None
        raise
    barrier()
    return out


# ------------------------------------------------------------------ before training


def check_output_dir(output_dir: str | Path, need_bytes: int) -> None:
    """Fail before training when `output_dir` is not writable or the disk is too small for a checkpoint."""
    root = Path(output_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".ppokit-write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise CheckpointError(f"output_dir {root} is not writable ({exc.strerror or exc}); "
                              "choose another output_dir or fix its permissions") from exc
    free = shutil.disk_usage(root).free
    if free < need_bytes:
        raise CheckpointError(
            f"output_dir {root} has {human_bytes(free)} free but a checkpoint needs about {human_bytes(need_bytes)}; "
            "free space, choose another output_dir, or set ignore_save_lr_and_optim / save_strategy no"
        )


def start_fresh(session) -> None:
    """Step 0 of `train()`: an output_dir holding an earlier run's records or checkpoints stops the run (a later
    `auto` would resume the wrong run, and its metrics would be replaced), unless overwrite_output_dir, which
    deletes them (see `ppokit.checkpoint.claim`)."""
    claim_output_dir(session.args, resuming=False, doing="train()")


def prepare_run(session) -> Path | None:
    """Before the first step of `train()`: check output_dir, then resume per `resume_from_checkpoint`.

    "auto" with no checkpoint yet starts from step 0 (with a note); true or a path must exist. A session
    that has already stepped (or was built by `Session.resume`) is not resumed again.
    """
    args = session.args
    check_output_dir(args.output_dir, checkpoint_bytes(session))
    if session.global_step > 0 or getattr(session, "resume_step", None) is not None:
        return None
    spec = args.resume_from_checkpoint
    if spec not in (None, False, ""):
        if not (str(spec).lower() == "auto" and not complete_checkpoints(args.output_dir)):
            path = resume_into(session, spec)
            check_steps_left(session, path)
            return path
        logger.warning("resume_from_checkpoint=auto: no checkpoint in %s yet; starting from step 0", args.output_dir)
    start_fresh(session)
    return None


def check_steps_left(session, path: Path) -> None:
    """After a resume: a checkpoint past the run's length is a sentence (not "done" with nothing trained); one at
    its end is a note (a re-queued job of a finished run ends at once)."""
    total, step = session.plan.rollout_steps, session.global_step
    if step > total:
        raise CheckpointError(
            f"{path.name} is at step {step} but this run has {total} steps ({session.plan.describe()}): there "
            f"is nothing left to train. Raise max_steps above {step} to continue it, or resume an earlier "
            "checkpoint-<step> by its path")
    if step == total and is_rank0():
        logger.warning("%s is at step %d, the last of this run: nothing is left to train (raise max_steps to "
                       "continue it)", path.name, step)


def interrupted_sentence(output_dir) -> str:
    """What a Ctrl-C'd command line says: where the run's newest complete checkpoint is."""
    return f"interrupted (Ctrl-C): the run stopped without a traceback; {where_to_continue(output_dir)}"


__all__ = ["Preempted", "Preemption", "guarded_run", "interrupted_sentence", "save_final", "save_session"]


def save_session(session, final: bool = False):
    """`Session.save`: `checkpoint-<step>` (unless final with save_strategy "no"); final also the HF model."""
    from ppokit.checkpoint.save import save_checkpoint
    from ppokit.tracking.console import quiet_hf_progress

    path = None
    session.tracker  # noqa: B018 - claims output_dir (refusing an earlier or live run's) before anything is written
    with quiet_hf_progress():
        if not final or session.args.save_strategy != "no":
            path = save_checkpoint(session)
        if final:  # every rank calls it (ZeRO-3 gathers the weights); rank 0 writes
            save_final(session)
    return path
