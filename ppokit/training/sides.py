"""The step's two owners (docs/seam.md): the `Producer` makes batches, the `Learner` trains on them.

    producer  loader, data records, rollout engine + agent loop, reward sources and their normaliser, dynamic
              sampling's counters (rollouts drawn, groups skipped)
    learner   policy engine, reference, critic, optimizers and LR schedules (inside the engines), KL controller,
              PTX loss, the update count

They meet only through batches (values) and a `WeightHandoff`: the learner publishes the weights of version v
(v = updates done), the producer pulls them between batches. Each side is a part of the checkpoint's state
protocol (`state_dict` / `load_state_dict`). Live keys are carried into the learner's objects by the learner
(`Learner.apply_live`, on its own thread); the producer reads its keys (temperature, top_p, ...) when it rolls out.
`owner_thread` set (the threaded producer sets it): a write to a learner field from another thread raises.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ppokit.algos.kl import AdaptiveKL, FixedKL


class WeightHandoff:
    """The versioned weight hand-off: `publish(module, v)` on the learner's side, `pull()` on the producer's.

    `version` is the policy version the rollout engine generates with (tagged on every row it makes). Pulling
    between batches is what keeps a threaded run on the inline schedule; `switch_engine` (the threaded hf engine
    with its WeightSwitch, `partial_rollout`) takes the weights at once, into the generation in flight between
    tokens or as soon as it ends.
    """

    def __init__(self, version: int = 0):
        self.version = self.published = version
        self.switch_engine = None
        self._module = None

    def publish(self, module, version: int) -> None:
        """The learner's weights of `version` are ready (`module` None: the version advanced, the weights did not)."""
        if module is not None and self.switch_engine is not None:
            self.switch_engine.update_weights(module)
        elif module is not None:
            self._module = module
        self.published = version

    def pull(self, engine) -> int:
        """Bring `engine` (the producer's rollout engine) to the newest published version; returns it. Between
        batches only."""
        if self._module is not None:
            module, self._module = self._module, None
            engine.update_weights(module)
        self.version = self.published
        return self.version

    def reset(self, version: int) -> None:
        """A resume: the versions are the checkpoint's (weights published by the resume stay pending)."""
        self.version = self.published = version


@dataclass(eq=False)
class Producer:
    """What makes batches: prompts, rollouts, rewards (phases `rollout`, `score`, `dynamic_sampling`)."""

    args: object
    dist: object
    plan: object  # the RunPlan; `plan.batch` is the step's batch geometry
    tokenizer: object
    rollout_engine: object
    reward_fns: list
    loader: object | None = None  # PromptLoader (None for evaluation only)
    train_records: list[dict] = field(default_factory=list)
    eval_records: list[dict] = field(default_factory=list)
    eval_spec: tuple | None = None  # (eval_datasets, eval_task_config) eval_records were built from
    agent: object | None = None  # rollout.agent_loop.AgentSpec of a multi_turn run, else None
    reward_normalizer: object | None = None
    threads: object | None = None  # ThreadPolicy (inline CPU runs); the threaded producer takes the trainer's count
    decoding_threads: object | None = None  # threads.DecodingThreads of a CPU run with ppokit's fixed count, else None
    handoff: WeightHandoff | None = None
    rollouts_drawn: int = 0
    skipped_groups: int = 0
    # Added to a draw's serial to make its batch's `origin`: unique to this producer, so a batch made elsewhere (a
    # file, another Session) never passes for one of this Session's draws (the Ledger's once-only update). From the
    # OS, not the seeded generators: a run's values do not depend on it.
    origin_base: int = field(default_factory=lambda: int.from_bytes(os.urandom(5), "big") << 20)

    @property
    def policy_version(self) -> int:
        return self.handoff.version if self.handoff is not None else 0

    def pull(self) -> int:
        """The learner's newest weights into the rollout engine (between batches, on the training thread)."""
        return self.handoff.pull(self.rollout_engine) if self.handoff is not None else 0

    def state_dict(self) -> dict:
        return {"rollouts_drawn": self.rollouts_drawn, "skipped_groups": self.skipped_groups,
                "loader": self.loader.state_dict(),
                "reward_normalizer": self.reward_normalizer.state_dict() if self.reward_normalizer is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.rollouts_drawn, self.skipped_groups = int(state["rollouts_drawn"]), int(state["skipped_groups"])
        self.loader.load_state_dict(state["loader"])
        if self.reward_normalizer is not None and state.get("reward_normalizer"):
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])


@dataclass(eq=False)
class Learner:
    """What trains: log-probs under the trainer's weights, advantages, updates (phases `with_logprobs`,
    `advantages`, `update`) and the weight hand-off's publishing side."""

    args: object
    dist: object
    plan: object  # the RunPlan (its schedules drive the optimizers' LR)
    policy: object  # training.build.Policy: tokenizer, DeepSpeed engine, reference, precision
    kl_ctl: FixedKL | AdaptiveKL
    logprob_batch_size: int
    handoff: WeightHandoff | None = None
    critic: object | None = None
    ptx_loss: Callable | None = None  # PTX term, `.loader` attached
    threads: object | None = None
    updates_done: int = 0
    flat_steps: int = 0  # leading steps where every group's rewards were equal (training/live.py warns once)
    applied_kl: dict = field(default_factory=dict)  # the KL keys the controller was last set from
    owner_thread: int | None = None  # set: writes from any other thread raise (the threaded producer sets it)

    def __setattr__(self, name, value):
        owner = self.__dict__.get("owner_thread")
        if owner is not None and threading.get_ident() != owner:
            raise RuntimeError(f"Learner.{name} written from thread {threading.current_thread().name!r}: the learner's "
                               "state belongs to the training thread (docs/seam.md)")
        object.__setattr__(self, name, value)

    def apply_live(self) -> None:
        """Live keys edited since the last phase reach the optimizers, the KL controller and the reference."""
        from ppokit.training.live import sync_live

        sync_live(self, self.args)

    def reference_logprobs(self, batch) -> torch.Tensor:
        """(B, R) reference log-probs: the frozen copy, or the actor with LoRA adapters disabled."""
        from ppokit.training.forward import batched_logprobs

        p = self.policy
        return batched_logprobs(p.reference, batch, self.logprob_batch_size, self.args.chunk_size, p.compute_dtype,
                                p.device, batch.temperature)

    def publish(self, weights_changed: bool) -> None:
        """Hand version `updates_done` to the producer (the weights too when this update changed them)."""
        if self.handoff is not None:
            self.handoff.publish(self.policy.engine.module if weights_changed else None, self.updates_done)

    def state_dict(self) -> dict:
        return {"updates_done": self.updates_done, "kl_ctl": self.kl_ctl.state_dict(),
                "ptx_loader": self.ptx_loss.loader.state_dict() if self.ptx_loss is not None else None}

    def load_state_dict(self, state: dict) -> None:
        self.updates_done = int(state["updates_done"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        if self.ptx_loss is not None and state.get("ptx_loader"):
            self.ptx_loss.loader.load_state_dict(state["ptx_loader"])
        if self.handoff is not None:
            self.handoff.reset(self.updates_done)


PRODUCER_FIELDS = frozenset(Producer.__dataclass_fields__) - {"args", "dist", "plan", "threads", "tokenizer"}
LEARNER_FIELDS = frozenset(Learner.__dataclass_fields__) | {"reference_logprobs"}


class StateView:
    """`session.state`: the flat view of before the split (notebooks and older code read `s.state.reward_fns`,
    `s.state.kl_ctl`): each name reads from, and writes to, the side that owns it; `run` and `plan` are the plan."""

    def __init__(self, producer: Producer, learner: Learner):
        object.__setattr__(self, "producer", producer)
        object.__setattr__(self, "learner", learner)

    def _owner(self, name: str):
        if name in PRODUCER_FIELDS:
            return self.producer
        if name in LEARNER_FIELDS or name in ("args", "dist", "plan", "threads"):
            return self.learner
        raise AttributeError(f"state has no {name!r}: the producer holds {sorted(PRODUCER_FIELDS)}, the learner "
                             f"{sorted(LEARNER_FIELDS)}")

    def __getattr__(self, name: str):
        if name == "run":
            name = "plan"
        return getattr(self._owner(name), name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._owner(name), name, value)
