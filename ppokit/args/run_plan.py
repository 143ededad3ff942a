"""The run's shape, decided once: how many rollout steps, optimizer steps, warmup and decay, and when to
evaluate, save and log. Everything that sizes the run reads a `RunPlan` (the LR schedules of the actor and the
critic, the progress bar, checkpoints and their resume checks, the report, `--print_config`, the bench); no other
code reads `max_steps` or `num_train_epochs` to size anything.

Rollout steps: `max_steps` when > 0, else ceil(num_train_epochs x prompt batches per epoch), the loader's
`dataloader_drop_last` honoured (the caller passes the batch count its loader really yields). Optimizer steps:
`update_iters x prompts_per_step / mini_batch_prompts` per rollout step (the `BatchPlan`), for the actor and the
critic alike (both walk the same mini-batches). Warmup: `warmup_steps` when > 0, else ceil(warmup_ratio x total
optimizer steps), as PaddleNLP's `get_warmup_steps`. Decay: `decay_steps` counts rollout steps, like `max_steps`,
and becomes decay_steps x optimizer steps per rollout; unset, the schedule decays over the whole run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from ppokit.algorithms import algorithm

from .batch import BatchPlan

SCHEDULE_ENDS = {"linear": "linear to 0", "cosine": "cosine to 0", "constant": "constant",
                 "constant_with_warmup": "constant after warmup", "polynomial": "polynomial to 1e-07"}


@dataclass(frozen=True)
class LRSchedule:
    """One optimizer's learning-rate schedule, in optimizer steps (keyword arguments of `make_lr_lambda`)."""

    kind: str
    total_steps: int
    warmup_steps: int
    lr: float
    min_lr: float | None = None
    decay_steps: int | None = None

    def spec(self) -> dict[str, Any]:
        """The keyword arguments `ppokit.engine.build_engine` takes as its `lr_schedule`."""
        return {k: v for k, v in asdict(self).items() if v is not None or k == "min_lr"}

    def describe(self) -> str:
        """e.g. 'lr 1e-05, warmup 1, cosine to 0' or 'lr 1e-05, cosine to 1e-06 over 20'."""
        if self.min_lr is not None and self.kind in ("linear", "cosine"):
            end = f"{self.kind} to {self.min_lr:g} over {self.decay_steps or self.total_steps}"
        else:
            end = SCHEDULE_ENDS.get(self.kind, self.kind)
        return f"lr {self.lr:g}, warmup {self.warmup_steps}, {end}"


@dataclass(frozen=True)
class RunPlan:
    """How long the run is and what happens when: see the module docstring. `batch` is the step's batch plan;
    its fields read through (`plan.prompts_per_step`)."""

    batch: BatchPlan
    rollout_steps: int
    mode: str  # "max_steps" | "epochs"
    epochs: float | None  # num_train_epochs in epoch mode
    batches_per_epoch: int | None  # prompt batches one pass over the data yields (None: data not read yet)
    actor_schedule: LRSchedule
    critic_schedule: LRSchedule
    eval_every: str  # "every 10 steps", "every step", "each epoch", "never"
    save_every: str
    log_every: str
    hand_steps: int = 0  # optimizer steps taken outside step() (phases called by hand) before train(): see follow_taken
    has_critic: bool = True  # a value model is trained (ppo, vapo): its schedule is shown

    def __getattr__(self, name: str):
        # The batch plan's fields read through, so `s.plan.prompts_per_step` keeps working.
        if name == "batch":
            raise AttributeError(name)
        return getattr(self.batch, name)

    def due(self, kind: str, step: int, args: Any, new_epoch: bool = False) -> bool:
        """Whether `kind` ("eval", "save", "log", "samples") is due after rollout step `step`, by the arguments'
        current cadence keys (live), the rule the plan's text states (`cadence_of`)."""
        return cadence_of(args, kind).due(step, new_epoch)

    @property
    def optimizer_steps(self) -> int:
        """Actor optimizer steps over the whole run."""
        return self.actor_schedule.total_steps

    def describe(self) -> str:
        """One line: '30 rollout steps = 1 epoch x 30 batches; 30 optimizer steps; lr 1e-05, warmup 1, cosine to 0'."""
        if self.mode == "epochs":
            shape = f"{self.rollout_steps} rollout steps = {self.epochs:g} epoch{'s' * (self.epochs != 1)} x " \
                    f"{self.batches_per_epoch} batches"
        else:
            shape = f"{self.rollout_steps} rollout steps (max_steps)"
        per = self.batch.optimizer_steps_per_rollout
        hand = (f" + {self.hand_steps} taken by hand (update() outside step()), so the schedule runs that much "
                "longer" if self.hand_steps else "")
        return (f"{shape}; {self.optimizer_steps} optimizer steps ({per} per rollout step{hand}); "
                f"{self.actor_schedule.describe()}")

    def lines(self) -> list[str]:
        """The plan as a few readable lines (the repr, `--print_config`'s notes, the report's header)."""
        b = self.batch
        passes = f"{b.update_iters} pass{'es' * (b.update_iters != 1)}"
        lines = [
            self.describe(),
            f"each step: {b.prompts_per_step} prompts x {b.rollout_n} = {b.sequences_per_step} sequences on "
            f"{b.world_size} rank{'s' * (b.world_size != 1)}; {passes} over mini-batches of "
            f"{b.mini_batch_prompts} prompts, micro-batches of {b.micro_batch_size}, "
            f"{b.gradient_accumulation_steps} per optimizer step",
        ]
        if self.has_critic:  # GRPO and the other critic-free algorithms have no critic schedule to show
            lines.append(f"critic: {self.critic_schedule.describe()}")
        lines.append(f"evaluate {at_the_end(self.eval_every, self.rollout_steps)}; save "
                     f"{at_the_end(self.save_every, self.rollout_steps, final='the final model')}; log {self.log_every}")
        return lines

    def __repr__(self) -> str:
        return "RunPlan(\n  " + "\n  ".join(self.lines()) + "\n)"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the batch plan's fields, the run's totals and both schedules."""
        out = self.batch.to_dict()
        out.update(rollout_steps=self.rollout_steps, run_mode=self.mode, epochs=self.epochs,
                   batches_per_epoch=self.batches_per_epoch, total_optimizer_steps=self.optimizer_steps,
                   total_prompts=self.rollout_steps * self.batch.prompts_per_step,
                   actor_lr_schedule=asdict(self.actor_schedule), critic_lr_schedule=asdict(self.critic_schedule),
                   eval_every=self.eval_every, save_every=self.save_every, log_every=self.log_every,
                   hand_steps=self.hand_steps, summary=self.describe())
        return out


def at_the_end(every: str, steps: int, final: str = "") -> str:
    """What `train()` does over `steps` steps for a cadence ("every 10 steps", "never", ...): it also evaluates
    after the last step when that step is not one of the cadence's, and always saves `final` (the final model)
    there. E.g. "after the last step (every 10 steps: none within 4)"."""
    tail = f"{final} after the last step" if final else "after the last step"
    if every == "never":
        return tail if final else every
    words = every.split()
    n = int(words[1]) if every.startswith("every ") and words[1].isdigit() else 1  # "every step", "each epoch": 1
    if every.startswith("every") and n > steps:
        return f"{tail} ({every}: none within {steps})"
    if final or (every.startswith("every") and steps % n):
        return f"{every} and {tail}"
    return every


def rollout_steps(args: Any, batches_per_epoch: int | None) -> tuple[int, str]:
    """(rollout steps, mode): `max_steps` when > 0, else ceil(num_train_epochs x batches_per_epoch)."""
    if args.max_steps > 0:
        return args.max_steps, "max_steps"
    if batches_per_epoch is None:
        raise ValueError("epoch mode needs the number of prompt batches per epoch (read the data first)")
    if args.num_train_epochs <= 0:
        from .errors import ConfigError

        raise ConfigError(f"max_steps={args.max_steps} and num_train_epochs={args.num_train_epochs}: the run has no "
                          "length; set max_steps > 0 or num_train_epochs > 0.")
    return max(1, math.ceil(args.num_train_epochs * batches_per_epoch)), "epochs"


def option(args: Any, key: str, critic: bool = False) -> Any:
    """`critic_<key>` for the critic when set, else the actor's `<key>` (PaddleNLP copies critic_* keys over)."""
    value = getattr(args, f"critic_{key}", None) if critic else None
    return getattr(args, key) if value is None else value


def lr_schedule(args: Any, optimizer_steps: int, per_rollout: int, *, critic: bool = False) -> LRSchedule:
    """The actor's (or, with its critic_* keys, the critic's) schedule over `optimizer_steps` optimizer steps."""
    total = max(optimizer_steps, 1)
    warmup = args.warmup_steps if args.warmup_steps > 0 else math.ceil(option(args, "warmup_ratio", critic) * total)
    decay = option(args, "decay_steps", critic)  # rollout steps, like max_steps
    return LRSchedule(kind=option(args, "lr_scheduler_type", critic), total_steps=total, warmup_steps=warmup,
                      lr=option(args, "learning_rate", critic), min_lr=option(args, "min_learning_rate", critic),
                      decay_steps=None if decay is None else max(1, decay * per_rollout))


@dataclass(frozen=True)
class Cadence:
    """When something recurs: a PaddleNLP `*_strategy` ("steps" | "epoch" | "no") and its `*_steps`. The one rule
    for both the plan's text and the train loop's "is it due now"."""

    strategy: str
    every: int | None = None

    def due(self, step: int, new_epoch: bool) -> bool:
        """"steps": every `every` steps; "epoch": when the prompts entered a new epoch at this step; else never."""
        if self.strategy == "epoch":
            return new_epoch
        return self.strategy == "steps" and bool(self.every) and self.every > 0 and step % self.every == 0

    def describe(self) -> str:
        """'every N steps' / 'every step' / 'each epoch' / 'never'."""
        if self.strategy == "epoch":
            return "each epoch"
        if self.strategy == "steps" and self.every and self.every > 0:
            return "every step" if self.every == 1 else f"every {self.every} steps"
        return "never"


def cadence(strategy: str, every: int | None) -> str:
    """'every N steps' / 'every step' / 'each epoch' / 'never' for a PaddleNLP `*_strategy` and its `*_steps`."""
    return Cadence(strategy, every).describe()


CADENCE_KINDS = ("eval", "save", "log", "samples")


def cadence_of(args: Any, kind: str) -> Cadence:
    """The cadence of `kind` from the (live: a notebook may change them between steps) arguments: "eval"
    (do_eval, evaluation_strategy, eval_steps), "save", "log" (the console summary) and "samples" (a few rows to
    VisualDL and samples.jsonl: every logging_steps unless logging_strategy is "no")."""
    if kind == "eval":
        return Cadence(args.evaluation_strategy if args.do_eval else "no", args.eval_steps)
    if kind == "save":
        return Cadence(args.save_strategy, args.save_steps)
    if kind == "log":
        return Cadence(args.logging_strategy, args.logging_steps)
    if kind == "samples":
        return Cadence("steps" if args.logging_strategy != "no" else "no", args.logging_steps)
    raise ValueError(f"unknown cadence {kind!r}; one of {', '.join(CADENCE_KINDS)}")


def run_plan(args: Any, batch: BatchPlan, batches_per_epoch: int | None) -> RunPlan:
    """The run's plan from the arguments, their batch plan and the prompt batches one epoch yields."""
    steps, mode = rollout_steps(args, batches_per_epoch)
    per = batch.optimizer_steps_per_rollout
    evaluate = cadence_of(args, "eval").describe()
    return RunPlan(
        batch=batch, rollout_steps=steps, mode=mode, epochs=args.num_train_epochs if mode == "epochs" else None,
        batches_per_epoch=batches_per_epoch,
        actor_schedule=lr_schedule(args, steps * per, per), critic_schedule=lr_schedule(args, steps * per, per, critic=True),
        eval_every=evaluate, save_every=cadence_of(args, "save").describe(),
        log_every=cadence_of(args, "log").describe(), has_critic=algorithm(args.rl_algorithm).needs_critic)


def follow_taken(plan: RunPlan, taken: int, global_step: int) -> RunPlan:
    """The plan whose LR schedules follow the optimizer steps actually taken: `taken` so far (the scheduler's count)
    plus the planned ones of the rollout steps still to come. Optimizer steps taken outside step() (a notebook's
    hand-driven rollout/score/update) would otherwise run the schedule out before the last steps (a linear or cosine
    LR of 0); the schedules grow by as many. Unchanged (the same object) when nothing new was taken by hand."""
    per = plan.batch.optimizer_steps_per_rollout
    extra = taken - global_step * per
    if extra <= plan.hand_steps:
        return plan
    grow = extra - plan.hand_steps

    def longer(schedule: LRSchedule) -> LRSchedule:
        return replace(schedule, total_steps=schedule.total_steps + grow)

    return replace(plan, hand_steps=extra, actor_schedule=longer(plan.actor_schedule),
                   critic_schedule=longer(plan.critic_schedule))
