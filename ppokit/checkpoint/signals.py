"""The one signal rule of a training run (every mode: inline or thread producer, evaluation, a slow reward
function, tool or judge call):

- the first SIGTERM starts no new work: the step (or evaluation) in progress finishes, then a checkpoint is
  written and the run stops with `Preempted` (exit 143); the run loop checks after each step, each evaluation and
  each periodic save (a checkpoint it just wrote at this step is the preemption's, not written twice);
- a second SIGTERM stops at once: the handler raises `StoppedAtOnce` (a KeyboardInterrupt, so no code that guards
  a user's function catches it or blames the function) wherever the main thread is; the batch the producer thread
  is making is abandoned, not waited for, and the command line exits 143 without waiting for threads still busy
  in user code;
- Ctrl-C (SIGINT) stops at once, the same way, with exit status 130.

`Preemption` is the handler and the flag; the run loop calls `check` (`Trainer.between_steps`) and
`RolloutPipeline.abandon` when a stop unwinds it. The command lines end with `stop_sentence` and
`ppokit.errors.exit_at_once`.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from ppokit.engine import all_reduce_sum, world_size
from ppokit.errors import PpokitError, StoppedAtOnce

logger = logging.getLogger("ppokit")


class Preempted(PpokitError):
    """The first SIGTERM stopped the run between steps, after writing a checkpoint; exit status 143."""

    exit_code = 143


def where_to_continue(output_dir) -> str:
    """'the newest complete checkpoint is …; continue with --resume_from_checkpoint auto', or that there is none."""
    from ppokit.checkpoint.files import complete_checkpoints

    found = complete_checkpoints(output_dir) if output_dir and Path(output_dir).is_dir() else []
    return (f"the newest complete checkpoint is {found[-1]}; continue with --resume_from_checkpoint auto" if found
            else "no checkpoint had been written yet")


class Preemption:
    """SIGTERM's handler and flag. `check` (between steps, after an evaluation) checkpoints and stops when any rank
    was signalled; a second SIGTERM raises `StoppedAtOnce` from the handler, in whatever the main thread runs."""

    def __init__(self, output_dir=None):
        self.signalled = 0
        self.previous = None
        self.output_dir = output_dir

    def handler(self, signum, frame) -> None:
        self.signalled += 1
        if self.signalled == 1:
            logger.warning("SIGTERM: finishing this step, then writing a checkpoint and stopping (a second SIGTERM "
                           "stops at once)")
            return
        raise StoppedAtOnce(f"stopped at once by a second SIGTERM (the step in progress was abandoned); "
                            f"{where_to_continue(self.output_dir)}")

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():  # signals can be handled there only
            self.previous = signal.signal(signal.SIGTERM, self.handler)

    def uninstall(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None

    def check(self, session) -> None:
        from ppokit.checkpoint.save import save_checkpoint

        signalled = float(self.signalled > 0)
        if world_size() > 1:  # every rank must agree: the checkpoint is collective
            signalled = all_reduce_sum(signalled)[0]
        if not signalled:
            return
        from ppokit.checkpoint.files import complete_checkpoints

        done = Path(session.args.output_dir) / f"checkpoint-{session.global_step}"  # the periodic save just wrote it
        path = done if done in complete_checkpoints(session.args.output_dir) else save_checkpoint(session)
        raise Preempted(f"stopped by SIGTERM after step {session.global_step}: wrote {path}; continue with "
                        "--resume_from_checkpoint auto")


def stop_sentence(exc: BaseException, output_dir) -> tuple[str, int]:
    """(what the command line prints, its exit status) for a stop by signal: a second SIGTERM's sentence and 143,
    or Ctrl-C's and 130."""
    if isinstance(exc, StoppedAtOnce):
        return f"error: {exc}", StoppedAtOnce.exit_code
    return f"interrupted (Ctrl-C): the run stopped without a traceback; {where_to_continue(output_dir)}", 130
