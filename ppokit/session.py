"""Session: the notebook-first API and the one trainer (`run_ppo.py` only calls `Session.train()`).

    s = Session.from_json("config/grpo_argument.json", max_steps=20)
    batch = s.rollout(); s.score(batch); s.compute_advantages(batch); stats = s.update(batch)
    s.step(); s.train(); s.evaluate(); s.save(); Session.resume(output_dir); s.show(batch)
    batch = s.produce(); metrics = s.consume(batch)      # the step's two halves (s.step() is exactly this)

Each call reads top to bottom and is safe to repeat; `s.args` may be changed between calls
(e.g. `s.args.temperature = 0.7`) and the next call uses the new value. A key fixed when the Session was built
(a model path, the batch geometry, the run's length) is refused with a sentence; `python -m ppokit.args explain
KEY` says which kind each key is.
"""

from __future__ import annotations

import logging
import time

import torch

from ppokit.args import Arguments, load_arguments
from ppokit.tracking.console import memory_metrics
from ppokit.training import phases
from ppokit.training.batch import RolloutBatch, fill_in
from ppokit.training.metrics import batch_metrics, gather_metrics, sample_rows
from ppokit.training.pipeline import DriftWatch, RolloutPipeline

logger = logging.getLogger("ppokit")


class Session:
    """One training run: models, data, rewards and the step, built from PaddleNLP-style arguments."""

    def __init__(self, args: Arguments, *, model=None, tokenizer=None, reward_functions=None):
        from ppokit.args.liveness import guard
        from ppokit.training.build import build_state

        self.args = args
        self.state = build_state(args, model=model, tokenizer=tokenizer, reward_functions=reward_functions)
        args._guard = guard  # from now on a key is live (next call), or refused with a sentence
        self.plan = self.state.run  # the run's plan; the step's batch sizes read through (plan.prompts_per_step)
        self.global_step = 0
        self.history: list[dict] = []
        self._tracker = None
        self.resume_step: int | None = None  # set by a resume: the tracker continues that run's files
        self._preemption = None  # set by train(): a SIGTERM checkpoints and stops between steps
        self._eval_spec = (args.eval_datasets, args.eval_task_config)  # what state.eval_records was built from
        # k = 0: produce then consume, the synchronous step
        self.pipeline = RolloutPipeline(args.staleness_threshold, threaded=args.async_producer == "thread",
                                        partial_rollout=args.partial_rollout, switch_token=args.partial_rollout_token)
        if self.pipeline.threaded:
            self._start_producer_thread()
        if self.pipeline.staleness:  # a checkpoint holds the batches produced and not yet consumed
            from ppokit.checkpoint.state import register

            register(self, "rollout_queue", self.pipeline)
        self._drift = DriftWatch()
        if args.staleness_threshold > 0 and args.rollout_is == "off":
            logger.warning("staleness_threshold=%d trains on batches up to %d policy version%s old without importance "
                           "correction; set rollout_is: token (or sequence) to correct them", args.staleness_threshold,
                           args.staleness_threshold, "" if args.staleness_threshold == 1 else "s")

    def _start_producer_thread(self) -> None:
        """async_producer: thread — the rollout engine generates on its own weights and its sync waits for the
        worker; one process only (the producer's collectives would interleave with the update's)."""
        from ppokit.errors import PpokitError
        from ppokit.training.pipeline import threaded_engine

        if self.state.plan.world_size > 1:
            raise PpokitError("async_producer: thread runs on one process for now (the rollout's collectives would "
                              "interleave with the update's); use async_producer: inline on several ranks")
        self.state.rollout_engine = threaded_engine(self.state.rollout_engine, self.model, self.pipeline)
        threads = getattr(self.state, "threads", None)
        if threads is not None and threads.adaptive:  # two phases at once: one thread count for both
            threads.adaptive = False

    def __repr__(self) -> str:
        """e.g. Session(model='smollm2-135m-instruct', algorithm='grpo', step=3/30, output_dir='output/grpo', ...)."""
        from ppokit.training.loop import total_steps

        args = self.args
        reward = next((h["reward/mean"] for h in reversed(self.history) if "reward/mean" in h), None)
        last = "no step yet" if reward is None else f"last reward/mean={reward:.3g}"
        agent = getattr(self.state, "agent", None)
        tools = f"tools={list(agent.tools)}, " if agent is not None and getattr(agent, "tools", None) else ""
        queue = f", rollouts: {self.pipeline.describe()}" if self.pipeline.staleness else ""
        return (f"Session(model={args.actor_model_name_or_path!r}, algorithm={args.rl_algorithm!r}, {tools}"
                f"step={self.global_step}/{total_steps(self)}, output_dir={args.output_dir!r}, {last}{queue})")

    @classmethod
    def from_json(cls, path: str, **overrides) -> Session:
        """Load a PaddleNLP JSON/YAML argument file; keyword arguments override its keys."""
        return cls(load_arguments(path, overrides=overrides))

    @classmethod
    def from_args(cls, **kwargs) -> Session:
        """Build from keyword arguments only (no file)."""
        return cls(load_arguments(None, overrides=kwargs))

    # ------------------------------------------------------------------ the four phases

    def rollout(self) -> RolloutBatch:
        """Draw the step's prompts and generate `rollout_n` responses each (plus reference log-probs). With
        `dynamic_sampling` the batch comes back scored: its groups were kept by their rewards."""
        batch = phases.rollout(self.state, self.args)
        if self.args.dynamic_sampling:
            batch = phases.dynamic_sampling(self.state, self.args, phases.score(self.state, self.args, batch))
        return phases.with_logprobs(self.state, self.args, batch)

    def score(self, batch: RolloutBatch) -> torch.Tensor:
        """Rewards for every response (rule functions, reward model or reward server); returns (B,)."""
        _need_batch(batch, "score")
        fill_in(batch, phases.score(self.state, self.args, batch))
        return batch.scores

    def compute_advantages(self, batch: RolloutBatch) -> torch.Tensor:
        """Advantages per `rl_algorithm` (scoring the batch first if needed); returns (B, R)."""
        _need_batch(batch, "compute_advantages")
        if batch.scores is None:
            self.score(batch)
        fill_in(batch, phases.advantages(self.state, self.args, batch))
        return batch.advantages

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """`update_iters` passes of actor (and critic) optimizer steps on the batch (its advantages computed
        first if needed); returns the stats."""
        _need_batch(batch, "update")
        if batch.advantages is None:
            self.compute_advantages(batch)
        return phases.update(self.state, self.args, batch)

    # ------------------------------------------------------------------ loops

    def produce(self) -> RolloutBatch:
        """The producing half of a step: draw prompts, generate (each row tagged with the policy version that made
        it), score, and under `dynamic_sampling` drop flat groups and draw more until the batch is full. Touches no
        optimizer state and runs none of the update's collectives."""
        batch = phases.rollout(self.state, self.args)
        batch = phases.score(self.state, self.args, batch)
        return phases.dynamic_sampling(self.state, self.args, batch)

    def consume(self, batch: RolloutBatch, started: float | None = None) -> dict[str, float]:
        """The consuming half: log-probs under the trainer's weights, advantages, the update and the rollout
        weight sync, then the step's metrics logged; returns them. `started`: when the step's clock started."""
        started = time.perf_counter() if started is None else started
        lag = self.pipeline.lag_metrics(batch, self.state.updates_done)  # async/*: how stale the batch trains
        batch = phases.with_logprobs(self.state, self.args, batch)
        batch = phases.advantages(self.state, self.args, batch)
        metrics = phases.update(self.state, self.args, batch)
        self.pipeline.wait()  # a batch generated beside this update is queued before the step ends
        self.global_step += 1
        metrics.update(batch_metrics(batch))
        metrics.update(lag)
        metrics["timing/step_s"] = time.perf_counter() - started
        tokens = float(batch.response_mask.sum() + batch.attention_mask[:, : batch.prompt_len].sum())
        metrics["throughput/tokens_per_s"] = tokens / max(metrics["timing/step_s"], 1e-9)
        metrics.update(memory_metrics(self.state.policy.device))  # memory/rss_gb; allocated/peak on a GPU
        metrics = gather_metrics(metrics, batch)  # all ranks' sequences; unchanged with one process
        self.history.append({"step": self.global_step, **metrics})
        self.last_batch = batch
        self.tracker.log(self.global_step, metrics)
        if self.state.dist.rank == 0:
            self._drift.see(self.global_step, metrics)  # the console's one warning of a rising log-prob mismatch
        if self.plan.due("samples", self.global_step, self.args):
            self.tracker.log_samples(self.global_step, sample_rows(batch, limit=4))
        from ppokit.tracking.step_metrics import StepMetrics

        return StepMetrics(metrics, self.global_step)  # a dict; at a prompt it reads as the step line, rounded

    def step(self) -> dict[str, float]:
        """produce() then consume(batch): rollout → score → dynamic sampling | log-probs → advantages → update →
        log; returns the step's metrics. The one place the phases' order is decided; each phase returns a new
        batch. With `staleness_threshold` k the batch consumed was produced k policy versions ago (the queue in
        `self.pipeline`, filled here; k = 0 produces it now)."""
        started = time.perf_counter()
        return self.consume(self.pipeline.next_batch(self.produce), started)

    def train(self) -> list[dict]:
        """Step until `max_steps`, with evaluation, checkpoints and progress; returns the metric history."""
        from ppokit.checkpoint.run import guarded_run
        from ppokit.training.loop import train_loop

        with guarded_run(self) as preemption:  # output_dir checks and lock, resume, SIGTERM, NaN -> a sentence
            self._preemption = preemption
            try:
                return train_loop(self)
            finally:
                self._preemption = None

    def between_steps(self) -> None:
        """Called by train() after each step: a pending SIGTERM writes a checkpoint and stops the run here."""
        if self._preemption is not None:
            self._preemption.check(self)

    def evaluate(self) -> dict[str, float]:
        """Score the eval set (greedy or sampled) and return eval/* metrics."""
        from ppokit.training.evaluate import evaluate

        self._reload_eval_data()
        metrics = evaluate(self.state, self.args)
        self.tracker.log(self.global_step, metrics)
        return metrics

    def _reload_eval_data(self) -> None:
        """eval_datasets / eval_task_config changed since the Session was built: load and encode them now."""
        spec = (self.args.eval_datasets, self.args.eval_task_config)
        if spec == self._eval_spec:
            return
        from ppokit.training.build import build_data_split

        records, _, _ = build_data_split(self.args, self.tokenizer, *spec)
        train = {r["_prompt_text"] for r in self.state.train_records}
        self.state.eval_records = [r for r in records if r["_prompt_text"] not in train]
        self._eval_spec = spec

    # ------------------------------------------------------------------ checkpoints

    def save(self, final: bool = False):
        """Write `output_dir/checkpoint-<step>` atomically; with final=True also the HF model in output_dir."""
        from ppokit.checkpoint import save_checkpoint
        from ppokit.checkpoint.run import save_final
        from ppokit.tracking.console import quiet_hf_progress

        path = None
        self.tracker  # noqa: B018 - claims output_dir (refusing an earlier or live run's) before anything is written
        with quiet_hf_progress():
            if not final or self.args.save_strategy != "no":
                path = save_checkpoint(self)
            if final:  # every rank calls it (ZeRO-3 gathers the weights); rank 0 writes
                save_final(self)
        return path

    @classmethod
    def resume(cls, output_dir: str, **overrides) -> Session:
        """Rebuild the run saved in `output_dir` (newest complete checkpoint) and continue from it."""
        from ppokit.checkpoint import STATE_FILE, find_checkpoint, resume_into
        from ppokit.checkpoint.guard import read_state

        is_run = not str(output_dir).rstrip("/").split("/")[-1].startswith("checkpoint-")
        path = find_checkpoint("auto", output_dir) if is_run else find_checkpoint(output_dir, output_dir)
        saved = read_state(path, STATE_FILE).get("config", {})
        saved["output_dir"] = str(path.parent)  # where the run is now, also when its folder was moved or copied
        saved.update(overrides)
        session = cls(load_arguments(None, overrides=saved))
        resume_into(session, "auto" if is_run else path)  # auto: a damaged newest checkpoint falls back
        from ppokit.training.live import follow_taken_steps

        follow_taken_steps(session)  # a run with phases called by hand: its schedules as they were when saved
        return session

    # ------------------------------------------------------------------ inspection

    def show(self, batch: RolloutBatch | None = None):
        """A table of prompt, response, rewards, advantage and length (ipywidgets in Jupyter)."""
        from ppokit.widgets import show_batch

        return show_batch(batch if batch is not None else getattr(self, "last_batch", None))

    @property
    def tracker(self):
        if self._tracker is None:
            from ppokit.checkpoint.claim import claim_output_dir
            from ppokit.tracking import Tracker

            # the first write: a live run's folder, or an earlier run's records, are refused (not erased)
            claim_output_dir(self.args, resuming=self.resume_step is not None, doing="this Session's first write")
            self._tracker = Tracker(
                replace=True,  # claim_output_dir decided: nothing of an earlier run is left unasked
                output_dir=self.args.output_dir,
                logging_dir=self.args.logging_dir,
                report_to=self.args.report_to,
                enabled=self.state.dist.rank == 0,
                run_name=self.args.run_name,
                resume_step=self.resume_step,
            )
            self._tracker.log_hparams(self.args, plan=self.plan)  # the model: args_info.json gets the defaults
        return self._tracker

    @property
    def model(self):
        """The trainable actor (unwrapped from DeepSpeed)."""
        return self.state.policy.engine.module

    @property
    def tokenizer(self):
        return self.state.policy.tokenizer

    def close(self) -> None:
        self.pipeline.close()
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None
            self.resume_step = self.global_step  # a later step()/evaluate() continues the files, not replaces them


def _need_batch(batch, call: str) -> None:
    """A phase called with something else than rollout()'s batch (None, a list, a dict) is a sentence."""
    if not isinstance(batch, RolloutBatch):
        from ppokit.errors import PpokitError

        raise PpokitError(f"{call}() needs the batch that rollout() returned, got {type(batch).__name__}: "
                          f"batch = s.rollout(); s.{call}(batch)")
