"""The run loop: `Trainer` owns a Session and steps it to the plan's end with progress, evaluation, checkpoints,
preemption, the drift watch and the final export (`Session.train()` is `Trainer(session).train()`). Also here: what
a Session's step needs around the phases (the pipeline, the step's log, the tracker's claim, the plan's end)."""

from __future__ import annotations

import logging

from ppokit.args import ConfigError

logger = logging.getLogger("ppokit")


def total_steps(session) -> int:
    """The run's rollout steps, from its plan (`ppokit.args.RunPlan`)."""
    return session.plan.rollout_steps


def progress_view(session, total: int):
    """The live widget inside Jupyter, the console progress bar elsewhere; `disable_tqdm` drops only the bar."""
    from ppokit.tracking import ConsoleProgress

    quiet, bar = session.learner.dist.rank != 0, not session.args.disable_tqdm
    if bar and not quiet:
        try:
            from ppokit.widgets import in_notebook, live_view

            if in_notebook():
                return live_view(total, history=session.history)
        except ImportError:
            pass
    return ConsoleProgress(total=total, disable=quiet, bar=bar)


def check_eval_data(session) -> None:
    if session.args.do_eval and not session.producer.eval_records:
        raise ConfigError("do_eval is on but there are no eval prompts: set eval_datasets (or eval_task_config; "
                         "prompts that also appear in the training data are removed), or set do_eval: false")


class Trainer:
    """Owns a Session for the length of `train()`: the run's frame, the steps, the cadences of the run plan
    (evaluation, checkpoints, the console summary), SIGTERM between steps, the drift watch and the final save.

    `frame(session)`: a context manager yielding the preemption flag (`checkpoint.run.guarded_run`: output_dir
    checks and lock, resume, SIGTERM, NaN -> a sentence); the Session hands it in, the checkpoint room being above
    this one."""

    def __init__(self, session, frame):
        from ppokit.training.pipeline import DriftWatch

        self.session, self.frame = session, frame
        self.preemption = None  # set while train() runs: a SIGTERM checkpoints and stops between steps
        self.drift = DriftWatch()

    def train(self) -> list[dict]:
        with self.frame(self.session) as preemption:
            self.preemption = preemption
            try:
                return train_loop(self)
            finally:
                self.preemption = None

    def between_steps(self) -> None:
        """After each step: a pending SIGTERM writes a checkpoint and stops the run here."""
        if self.preemption is not None:
            self.preemption.check(self.session)

    def step(self) -> dict[str, float]:
        """One step of the session, then the console's one warning of a rising log-prob mismatch."""
        session = self.session
        metrics = session.step()
        if session.learner.dist.rank == 0:
            self.drift.see(session.global_step, metrics)
        return metrics


def train_loop(trainer: Trainer) -> list[dict]:
    """Run the steps; evaluation every `eval_steps`, checkpoints every `save_steps`, model saved at the end.

    `Trainer.train` has already prepared the run (`checkpoint.prepare_run`: output_dir, resume)."""
    import time

    from ppokit.tracking import format_summary
    from ppokit.tracking.console import say, summary_for
    from ppokit.training.live import follow_taken_steps

    session = trainer.session
    started = time.perf_counter()
    follow_taken_steps(session)  # phases called by hand before train(): the schedules follow the steps taken
    args, plan, loader = session.args, session.plan, session.producer.loader
    total = total_steps(session)
    check_eval_data(session)
    progress = progress_view(session, total)
    session.tracker.start_clock()  # metrics' "time" counts from here, the first step included
    epoch, evaluated_at = loader.epoch, None
    rank0 = session.learner.dist.rank == 0
    try:
        while session.global_step < total:
            metrics = trainer.step()
            trainer.between_steps()  # a SIGTERM checkpoints and stops here
            step = session.global_step
            new_epoch = loader.epoch != epoch
            between = time.perf_counter()
            if plan.due("eval", step, args, new_epoch):
                metrics.update(session.evaluate())
                session.history[-1].update(metrics)
                evaluated_at = step
                trainer.between_steps()  # a SIGTERM during the evaluation stops here, before another step
            epoch = loader.epoch
            shown = dict(metrics)
            if plan.due("save", step, args, new_epoch) and step < total:
                saving = time.perf_counter()
                session.save()
                shown["timing/save_s"] = time.perf_counter() - saving  # the console names it: a slow step explained
            if hasattr(progress, "exclude"):  # the bar's s/step is the steps' own; evaluation and save are named
                progress.exclude(time.perf_counter() - between)
            progress.update(step, shown)
            if plan.due("log", step, args, new_epoch) and rank0 and hasattr(progress, "write"):
                progress.write("ppokit: " + format_summary(step, shown, total=total))  # the console, not the live view
            trainer.between_steps()  # a SIGTERM during the save: no new step (the checkpoint just written is kept)
        if hasattr(progress, "write"):
            progress.close()  # the steps are done: the bar's s/step stays theirs, what follows says itself
        after = finish(trainer, evaluated_at, say if rank0 else lambda text: None)
        if rank0 and hasattr(progress, "write"):
            say(summary_for(session, time.perf_counter() - started, after))
    except KeyboardInterrupt:  # Ctrl-C or a second SIGTERM (ppokit.checkpoint.signals): nothing in flight is waited for
        session.pipeline.abandon()
        raise
    finally:
        progress.close()
        session.close()
    return session.history


def finish(trainer, evaluated_at, say) -> dict[str, float]:
    """After the last step: the final evaluation (unless the last step evaluated; it says itself) and the final
    model, said before it starts; its seconds go to tracking_state.json (the report) and are returned for the
    summary, apart from the steps' own times (metrics.jsonl keeps one row per step)."""
    import time

    session = trainer.session
    args = session.args
    if args.do_eval and session.producer.eval_records and evaluated_at != session.global_step:
        final = session.evaluate()
        if session.history:
            session.history[-1].update(final)
        trainer.between_steps()
    say(f"saving the final model to {args.output_dir} ...")
    started = time.perf_counter()
    session.save(final=True)
    seconds = time.perf_counter() - started
    say(f"saved in {seconds:.1f} s")
    session.tracker.remember(final_save_s=round(seconds, 3))
    return {"final save": seconds}


# ------------------------------------------------------------------ around a Session's step


def start_pipeline(session):
    """The queue between produce and consume (`training.pipeline`), its producer thread started when asked."""
    from ppokit.training.pipeline import RolloutPipeline, usable_staleness

    args = session.args  # k is capped at what the run's steps can use (with a note)
    pipeline = RolloutPipeline(usable_staleness(args.staleness_threshold, session.plan.rollout_steps),
                               threaded=args.async_producer == "thread", partial_rollout=args.partial_rollout,
                               switch_token=args.partial_rollout_token)
    if pipeline.threaded:
        start_producer_thread(session, pipeline)
    if args.staleness_threshold > 0 and args.rollout_is == "off":
        logger.warning("staleness_threshold=%d trains on batches up to %d policy version%s old without importance "
                       "correction; set rollout_is: token (or sequence) to correct them", args.staleness_threshold,
                       args.staleness_threshold, "" if args.staleness_threshold == 1 else "s")
    return pipeline


def start_producer_thread(session, pipeline) -> None:
    """async_producer: thread — the rollout engine generates on its own weights and the learner's objects refuse
    writes from any thread but this one; one process only (the producer's collectives would interleave with the
    update's)."""
    import threading

    from ppokit.errors import PpokitError
    from ppokit.training.pipeline import threaded_engine

    producer, learner = session.producer, session.learner
    if producer.plan.batch.world_size > 1:
        raise PpokitError("async_producer: thread runs on one process for now (the rollout's collectives would "
                          "interleave with the update's); use async_producer: inline on several ranks")
    producer.rollout_engine = threaded_engine(producer.rollout_engine, session.model, pipeline)
    if pipeline.switch is not None:  # the hf engine takes the weights between tokens
        producer.handoff.switch_engine = producer.rollout_engine
    if learner.threads is not None and learner.threads.adaptive:  # two phases at once: one thread count for both
        learner.threads.adaptive = False
    producer.threads = None  # the worker takes the trainer's thread count (`pipeline._in_thread`)
    learner.owner_thread = threading.get_ident()


def check_steps_left(session) -> None:
    """A step past the plan's last is refused with a sentence: its LR schedule has ended (a cosine one would wrap
    back up), so the plan is extended explicitly, by resuming with a larger max_steps (docs/seam.md)."""
    total = session.plan.rollout_steps
    if session.global_step >= total:
        from ppokit.errors import PpokitError

        raise PpokitError(f"step {session.global_step} is the last of this run's plan ({session.plan.describe()}); "
                          "another step would train on a schedule that has ended. To train longer, extend the plan: "
                          "s.save(); s = Session.resume(output_dir, max_steps=N) with N above "
                          f"{session.global_step}")


def log_step(session, batch, metrics: dict[str, float], started: float) -> dict[str, float]:
    """The step's metrics (batch, timing, throughput, memory, all ranks') into the history and the tracker, and a
    few sample rows when the plan says so; returns them."""
    from ppokit.tracking.console import memory_metrics
    from ppokit.training.metrics import batch_metrics, gather_metrics, sample_rows

    metrics.update(batch_metrics(batch))
    metrics["timing/step_s"] = time_since(started)
    tokens = float(batch.response_mask.sum() + batch.attention_mask[:, : batch.prompt_len].sum())
    metrics["throughput/tokens_per_s"] = tokens / max(metrics["timing/step_s"], 1e-9)
    metrics.update(memory_metrics(session.learner.policy.device))  # memory/rss_gb; allocated/peak on a GPU
    metrics = gather_metrics(metrics, batch)  # all ranks' sequences; unchanged with one process
    session.history.append({"step": session.global_step, **metrics})
    session.tracker.log(session.global_step, metrics)
    if session.plan.due("samples", session.global_step, session.args):
        session.tracker.log_samples(session.global_step, sample_rows(batch, limit=4))
    from ppokit.tracking.step_metrics import StepMetrics

    return StepMetrics(metrics, session.global_step)  # a dict; at a prompt it reads as the step line, rounded


def evaluate_now(session) -> dict[str, float]:
    """`Session.evaluate`: the eval data reloaded when its keys changed, the newest weights pulled, the eval set
    scored and logged at the current step."""
    from ppokit.training.evaluate import evaluate, reload_eval_data

    reload_eval_data(session.producer)  # eval_datasets / eval_task_config changed since: loaded now
    session.producer.pull()
    metrics = evaluate(session.producer)
    session.tracker.log(session.global_step, metrics)
    return metrics


def time_since(started: float) -> float:
    import time

    return time.perf_counter() - started


def describe(session) -> str:
    """e.g. Session(model='smollm2-135m-instruct', algorithm='grpo', step=3/30, output_dir='output/grpo', ...)."""
    args = session.args
    reward = next((h["reward/mean"] for h in reversed(session.history) if "reward/mean" in h), None)
    last = "no step yet" if reward is None else f"last reward/mean={reward:.3g}"
    agent = session.producer.agent
    tools = f"tools={list(agent.tools)}, " if agent is not None and getattr(agent, "tools", None) else ""
    queue = f", rollouts: {session.pipeline.describe()}" if session.pipeline.staleness or session.pipeline.queue else ""
    return (f"Session(model={args.actor_model_name_or_path!r}, algorithm={args.rl_algorithm!r}, {tools}"
            f"step={session.global_step}/{total_steps(session)}, output_dir={args.output_dir!r}, {last}{queue})")
