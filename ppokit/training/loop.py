"""`Session.train()`: step to max_steps with progress, evaluation, checkpoints and the final export."""

from __future__ import annotations

import logging

from ppokit.args import ConfigError

logger = logging.getLogger("ppokit")


def total_steps(session) -> int:
    """The run's rollout steps, from its plan (`ppokit.args.RunPlan`)."""
    return session.state.run.rollout_steps


def progress_view(session, total: int):
    """The live widget inside Jupyter, the console progress bar elsewhere; `disable_tqdm` drops only the bar."""
    from ppokit.tracking import ConsoleProgress

    quiet, bar = session.state.dist.rank != 0, not session.args.disable_tqdm
    if bar and not quiet:
        try:
            from ppokit.widgets import in_notebook, live_view

            if in_notebook():
                return live_view(total, history=session.history)
        except ImportError:
            pass
    return ConsoleProgress(total=total, disable=quiet, bar=bar)


def check_eval_data(session) -> None:
    if session.args.do_eval and not session.state.eval_records:
        raise ConfigError("do_eval is on but there are no eval prompts: set eval_datasets (or eval_task_config; "
                         "prompts that also appear in the training data are removed), or set do_eval: false")


def train_loop(session) -> list[dict]:
    """Run the steps; evaluation every `eval_steps`, checkpoints every `save_steps`, model saved at the end.

    `Session.train` has already prepared the run (`checkpoint.prepare_run`: output_dir, resume)."""
    import time

    from ppokit.tracking import format_summary
    from ppokit.tracking.console import say, summary_for
    from ppokit.training.live import follow_taken_steps

    started = time.perf_counter()
    follow_taken_steps(session)  # phases called by hand before train(): the schedules follow the steps taken
    args, plan = session.args, session.state.run
    total = total_steps(session)
    check_eval_data(session)
    progress = progress_view(session, total)
    session.tracker.start_clock()  # metrics' "time" counts from here, the first step included
    epoch, evaluated_at = session.state.loader.epoch, None
    try:
        while session.global_step < total:
            metrics = session.step()
            session.between_steps()  # a SIGTERM checkpoints and stops here
            step = session.global_step
            new_epoch = session.state.loader.epoch != epoch
            between = time.perf_counter()
            if plan.due("eval", step, args, new_epoch):
                metrics.update(session.evaluate())
                session.history[-1].update(metrics)
                evaluated_at = step
            epoch = session.state.loader.epoch
            shown = dict(metrics)
            if plan.due("save", step, args, new_epoch) and step < total:
                saving = time.perf_counter()
                session.save()
                shown["timing/save_s"] = time.perf_counter() - saving  # the console names it: a slow step explained
            if hasattr(progress, "exclude"):  # the bar's s/step is the steps' own; evaluation and save are named
                progress.exclude(time.perf_counter() - between)
            progress.update(step, shown)
            if plan.due("log", step, args, new_epoch) and session.state.dist.rank == 0 and hasattr(progress, "write"):
                progress.write("ppokit: " + format_summary(step, shown, total=total))  # the console, not the live view
        if hasattr(progress, "write"):
            progress.close()  # the steps are done: the bar's s/step stays theirs, what follows says itself
        after = finish(session, evaluated_at, say if session.state.dist.rank == 0 else lambda text: None)
        if session.state.dist.rank == 0 and hasattr(progress, "write"):
            say(summary_for(session, time.perf_counter() - started, after))
    finally:
        progress.close()
        session.close()
    return session.history


def finish(session, evaluated_at, say) -> dict[str, float]:
    """After the last step: the final evaluation (unless the last step evaluated; it says itself) and the final
    model, said before it starts; its seconds go to tracking_state.json (the report) and are returned for the
    summary, apart from the steps' own times (metrics.jsonl keeps one row per step)."""
    import time

    args = session.args
    if args.do_eval and session.state.eval_records and evaluated_at != session.global_step:
        final = session.evaluate()
        if session.history:
            session.history[-1].update(final)
    say(f"saving the final model to {args.output_dir} ...")
    started = time.perf_counter()
    session.save(final=True)
    seconds = time.perf_counter() - started
    say(f"saved in {seconds:.1f} s")
    session.tracker.remember(final_save_s=round(seconds, 3))
    return {"final save": seconds}
