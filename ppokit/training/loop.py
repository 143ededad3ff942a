"""`Session.train()`: step to max_steps with progress, evaluation, checkpoints and the final export."""

from __future__ import annotations

import logging
import math

logger = logging.getLogger("ppokit")


def total_steps(session) -> int:
    """`max_steps` (rollout steps) when > 0, else `num_train_epochs` × prompt batches per epoch."""
    args = session.args
    if args.max_steps > 0:
        return args.max_steps
    return max(1, math.ceil(args.num_train_epochs * len(session.state.loader)))


def progress_view(session, total: int):
    """The live widget inside Jupyter, the console progress bar elsewhere."""
    from ppokit.tracking import ConsoleProgress

    disable = bool(session.args.disable_tqdm) or session.state.dist.rank != 0
    if not disable:
        try:
            from ppokit.widgets import in_notebook, live_view

            if in_notebook():
                return live_view(total)
        except ImportError:
            pass
    return ConsoleProgress(total=total, disable=disable)


def should(every: int | None, step: int) -> bool:
    return bool(every) and every > 0 and step % every == 0


def train_loop(session) -> list[dict]:
    """Run the steps; evaluation every `eval_steps`, checkpoints every `save_steps`, model saved at the end."""
    from ppokit.tracking import format_summary

    args = session.args
    from ppokit.checkpoint import prepare_run

    prepare_run(session)  # output_dir writable with room for a checkpoint; resume_from_checkpoint
    total = total_steps(session)
    progress = progress_view(session, total)
    try:
        while session.global_step < total:
            metrics = session.step()
            step = session.global_step
            if args.do_eval and args.evaluation_strategy != "no" and should(args.eval_steps, step):
                metrics.update(session.evaluate())
            progress.update(step, metrics)
            if should(args.logging_steps, step) and session.state.dist.rank == 0:
                logger.info(format_summary(step, metrics, total=total))
            if args.save_strategy == "steps" and should(args.save_steps, step) and step < total:
                session.save()
        if args.do_eval and session.state.eval_records:
            session.evaluate()
        session.save(final=True)
    finally:
        progress.close()
        session.close()
    return session.history
