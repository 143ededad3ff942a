"""Session: the notebook surface of a run (`Session.train()` hands the run loop to `training.loop.Trainer`).

    s = Session.from_json("config/grpo_argument.json", max_steps=20)
    batch = s.rollout(); s.score(batch); s.compute_advantages(batch); stats = s.update(batch)
    s.step(); s.train(); s.evaluate(); s.save(); Session.resume(output_dir); s.show(batch)
    batch = s.produce(); metrics = s.consume(batch)      # the step's two halves (s.step() is exactly this)

Every method walks the one ordered list of phases (`training.phases.PHASES`, docs/seam.md) up to its own; each
phase makes a new batch (`s.latest(b)` is the newest made from `b`); a batch is trained on once. `s.args` may be
changed between calls; a key fixed when the Session was built is refused with a sentence.
"""

from __future__ import annotations

import time

import torch

from ppokit.args import Arguments, load_arguments
from ppokit.training import loop, phases
from ppokit.training.batch import RolloutBatch
from ppokit.training.sides import StateView


class Session:
    """One training run: a `Producer` and a `Learner` (`training.sides`) built from PaddleNLP-style arguments."""

    def __init__(self, args: Arguments, *, model=None, tokenizer=None, reward_functions=None):
        from ppokit.args.liveness import guard
        from ppokit.training.build import build_sides

        self.args = args
        self.producer, self.learner = build_sides(args, model=model, tokenizer=tokenizer,
                                                  reward_functions=reward_functions)
        args._guard = guard  # from now on a key is live (next call), or refused with a sentence
        self.global_step, self.history, self.resume_step = 0, [], None  # resume_step: a resume's step
        self._tracker, self.ledger = None, phases.Ledger()  # ledger: each batch's newest value, trained or not
        self.pipeline = loop.start_pipeline(self)  # staleness k: the queue between produce and consume

    plan = property(lambda self: self.learner.plan, doc="The run's plan (`ppokit.args.RunPlan`); `plan.batch` is "
                    "the step's batch geometry.")
    state = property(lambda self: StateView(self.producer, self.learner), doc="Both sides in one flat view, as "
                     "before the split (`s.state.reward_fns` reads the producer's, `s.state.kl_ctl` the learner's).")

    __repr__ = loop.describe  # e.g. Session(model=..., algorithm='grpo', step=3/30, ...)

    @classmethod
    def from_json(cls, path: str, **overrides) -> Session:
        """Load a PaddleNLP JSON/YAML argument file; keyword arguments override its keys."""
        return cls(load_arguments(path, overrides=overrides))

    @classmethod
    def from_args(cls, **kwargs) -> Session:
        """Build from keyword arguments only (no file)."""
        return cls(load_arguments(None, overrides=kwargs))

    def walk(self, batch: RolloutBatch | None, upto: str, call: str = "walk"):
        """(batch, metrics): `batch` (None: a new draw) through the phases up to `upto`, each missing one once."""
        return self.ledger.walk(self.producer, self.learner, batch, upto, call)

    def rollout(self) -> RolloutBatch:
        """Draw the step's prompts and generate `rollout_n` responses each (tagged with their policy version)."""
        self.producer.pull()  # the learner's newest weights, between batches
        return self.walk(None, "rollout")[0]

    def score(self, batch: RolloutBatch) -> torch.Tensor:
        """Rewards for every response (rule functions, reward model or reward server); returns (B,)."""
        return self.walk(batch, "score", "score")[0].scores

    def compute_advantages(self, batch: RolloutBatch) -> torch.Tensor:
        """Advantages per `rl_algorithm` (scoring, dynamic sampling and log-probs first where missing); (B, R)."""
        return self.walk(batch, "advantages", "compute_advantages")[0].advantages

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """`update_iters` passes of actor (and critic) optimizer steps on the batch; returns the stats."""
        return self.walk(batch, "update", "update")[1]


    def produce(self) -> RolloutBatch:
        """The producing half: the learner's newest weights pulled, then rollout → score → dynamic sampling."""
        self.producer.pull()
        return self._produce()

    def _produce(self) -> RolloutBatch:  # also the producer thread's work: it touches the producer only
        return phases.walk(self.producer, self.learner, None, phases.PRODUCED)[0]

    def consume(self, batch: RolloutBatch, started: float | None = None) -> dict[str, float]:
        """The consuming half: log-probs, advantages, the update, then the step's metrics logged; returns them."""
        loop.check_steps_left(self)  # past the plan's last step is a sentence, not a schedule wrapping around
        started = time.perf_counter() if started is None else started
        lag = self.pipeline.lag_metrics(batch, self.learner.updates_done)  # async/*: how stale the batch trains
        batch, metrics = self.walk(batch, "update", "consume")
        self.pipeline.wait()  # a batch generated beside this update is queued before the step ends
        self.global_step += 1
        self.last_batch = batch
        return loop.log_step(self, batch, {**metrics, **lag}, started)

    def step(self) -> dict[str, float]:
        """produce() then consume(batch); with `staleness_threshold` k the batch consumed was produced k policy
        versions ago (the queue in `self.pipeline`; k = 0 produces it now). Returns the step's metrics."""
        loop.check_steps_left(self)
        started = time.perf_counter()
        batch = self.pipeline.next_batch(self._produce, pull=self.producer.pull)
        return self.consume(batch, started)

    def train(self) -> list[dict]:
        """Step until the plan's last step, with evaluation, checkpoints and progress; returns the metric history."""
        from ppokit.checkpoint.run import guarded_run

        return loop.Trainer(self, guarded_run).train()

    def evaluate(self) -> dict[str, float]:
        """Score the eval set (greedy or sampled) and return eval/* metrics."""
        return loop.evaluate_now(self)


    def save(self, final: bool = False):
        """Write `output_dir/checkpoint-<step>` atomically; with final=True also the HF model in output_dir."""
        from ppokit.checkpoint.run import save_session

        return save_session(self, final)

    @classmethod
    def resume(cls, output_dir: str, **overrides) -> Session:
        """Rebuild the run saved in `output_dir` (newest complete checkpoint) and continue from it."""
        from ppokit.checkpoint.resume import resume_session

        return resume_session(cls, output_dir, overrides)


    def latest(self, batch: RolloutBatch) -> RolloutBatch:
        """The newest value made from `batch` by the calls so far (`s.score(b)` leaves `b` as it was; this is the
        scored one)."""
        return self.ledger.newest(batch)

    def show(self, batch: RolloutBatch | None = None):
        """A table of prompt, response, rewards, advantage and length (ipywidgets in Jupyter)."""
        from ppokit.widgets import show_batch

        batch = batch if batch is not None else getattr(self, "last_batch", None)
        return show_batch(self.ledger.newest(batch))

    @property
    def tracker(self):
        if self._tracker is None:
            from ppokit.checkpoint.claim import open_tracker

            self._tracker = open_tracker(self)
        return self._tracker

    model = property(lambda self: self.learner.policy.engine.module, doc="The trainable actor (out of DeepSpeed).")
    tokenizer = property(lambda self: self.learner.policy.tokenizer)

    def close(self) -> None:
        self.pipeline.close()
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None
            self.resume_step = self.global_step  # a later step()/evaluate() continues the files, not replaces them

