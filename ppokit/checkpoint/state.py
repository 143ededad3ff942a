"""The state protocol: every stateful part of a run saves and loads its own state, and a checkpoint lists them.

    class Stateful(Protocol):
        def state_dict(self) -> dict: ...
        def load_state_dict(self, state: dict) -> None: ...

The parts a Session has (`parts_of`), in the order a resume loads them:
  counters     the Session's global_step
  run_plan     the run's length and schedules when saved (a resume says when they changed)
  producer     `training.sides.Producer`: rollouts drawn, groups skipped, the prompt loader's position, the reward
               normaliser
  learner      `training.sides.Learner`: updates done, the KL controller, the PTX loader's position
  rollout_queue  the batches produced and not yet consumed (per rank; empty when k = 0): a resume with any k
               consumes them first, so a change of k neither skips nor repeats a prompt
  <extra>      parts registered with `register(session, name, part)`
  tracker      the metric history; loading it continues metrics.jsonl / samples.jsonl from the saved step
  rng          python/numpy/torch (CUDA) generators: loaded last, after everything that might draw
JSON parts go into trainer_state.json under "parts"; per-rank parts (rng, extras) into torch files, one per rank.
The models are not parts: DeepSpeed writes their folders (actor/, actor_ds/, ...). `manifest.json` lists
everything a checkpoint folder holds. Nothing here writes a Session's private fields: the adapters below use its
public attributes (`global_step`, `history`, `resume_step`, `tracker`).
"""

from __future__ import annotations

import logging
import random
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch

logger = logging.getLogger("ppokit")

MANIFEST_FILE = "manifest.json"
_EXTRA: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> {name: Part}


@runtime_checkable
class Stateful(Protocol):
    """Something a checkpoint saves and a resume restores."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class Part:
    """A named stateful part; `per_rank` parts are saved by every rank into `file` (with `{rank}` filled in)."""

    name: str
    obj: Stateful
    per_rank: bool = False
    file: str | None = None

    def where(self, rank: int) -> str:
        return (self.file or f"state_{self.name}_{{rank}}.pt").format(rank=rank) if self.per_rank else \
            f"trainer_state.json: parts.{self.name}"


# ------------------------------------------------------------------ the built-in parts


class Counters:
    """The Session's own counter (each side saves its own: `Producer` and `Learner` are parts themselves)."""

    def __init__(self, session):
        self.session = session

    def state_dict(self) -> dict:
        return {"global_step": self.session.global_step}

    def load_state_dict(self, state: dict) -> None:
        self.session.global_step = state["global_step"]


class PlanState:
    """The run plan is computed from the arguments; its saved form is compared, not loaded."""

    def __init__(self, session, path: Path | None = None):
        self.session, self.path = session, path

    def state_dict(self) -> dict:
        return self.session.plan.to_dict()

    def load_state_dict(self, state: dict) -> None:
        from ppokit.checkpoint.safety import note_plan_change

        note_plan_change(self.path or Path("checkpoint"), state, self.session.plan)


class TrackerState:
    """The metric history; loading continues the run's files from the saved step (rows after it are dropped)."""

    def __init__(self, session):
        self.session = session

    def state_dict(self) -> dict:
        return {"step": self.session.global_step, "history": self.session.history}

    def load_state_dict(self, state: dict) -> None:
        step = state["step"]
        self.session.history = [h for h in state.get("history", []) if h["step"] <= step]
        self.session.resume_step = step  # a tracker opened from now on continues the files
        self.session.tracker.truncate_after(step)  # opens it (continuing), or cuts an open one back


class RngState:
    def state_dict(self) -> dict:
        state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict) -> None:
        random.setstate(state["python"])
        np.random.set_state(state["numpy"])
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


def rng_state() -> dict:
    return RngState().state_dict()


def set_rng_state(state: dict) -> None:
    RngState().load_state_dict(state)


# ------------------------------------------------------------------ the registry


def register(session, name: str, part: Stateful, *, per_rank: bool = True) -> None:
    """Add a stateful part to what `session`'s checkpoints save and its resumes restore (e.g. an asynchronous
    rollout queue). Per rank by default: each rank saves its own `state_<name>_<rank>.pt` (tensors welcome);
    `per_rank=False` keeps a JSON-able state in trainer_state.json (rank 0's)."""
    if not isinstance(part, Stateful):
        raise TypeError(f"the stateful part {name!r} needs state_dict() and load_state_dict(state) methods")
    if name in BUILT_IN:
        raise ValueError(f"{name!r} is a built-in part of every checkpoint ({', '.join(BUILT_IN)}); choose another name")
    _EXTRA.setdefault(session, {})[name] = Part(name, part, per_rank=per_rank)


BUILT_IN = ("counters", "run_plan", "producer", "learner", "rollout_queue", "tracker", "rng")


def queue_part(session) -> list[Part]:
    """The batches produced and not yet consumed, one file per rank, for every k: a k = 0 checkpoint holds an empty
    queue, and a k = 0 resume of a k > 0 checkpoint trains its queued batches first."""
    pipeline = getattr(session, "pipeline", None)
    return [Part("rollout_queue", pipeline, per_rank=True)] if pipeline is not None else []


def parts_of(session, path: Path | None = None) -> list[Part]:
    """Every stateful part of `session`, in load order (rng last)."""
    return [Part("counters", Counters(session)), Part("run_plan", PlanState(session, path)),
            Part("producer", session.producer), Part("learner", session.learner), *queue_part(session),
            *_EXTRA.get(session, {}).values(), Part("tracker", TrackerState(session)),
            Part("rng", RngState(), per_rank=True, file="rng_state_{rank}.pt")]


def legacy_parts(saved: dict) -> dict:
    """The parts of a format-1 or format-2 trainer_state.json in today's form (format 1: flat keys, before the
    state protocol; format 2: counters, data and controllers, before the producer/learner split)."""
    if "parts" in saved:
        old = saved["parts"]
    else:
        old = {"counters": {k: saved[k] for k in ("global_step", "rollouts_drawn", "updates_done", "skipped_groups")},
               "run_plan": saved.get("run_plan"),
               "data": {"loader": saved["loader"], "ptx_loader": saved.get("ptx_loader")},
               "controllers": {"kl_ctl": saved["kl_ctl"], "reward_normalizer": saved.get("reward_normalizer")},
               "tracker": {"step": saved["global_step"], "history": saved.get("history", [])}}
    counters, data, controllers = old["counters"], old["data"], old["controllers"]
    return {**{k: v for k, v in old.items() if k not in ("counters", "data", "controllers")},
            "counters": {"global_step": counters["global_step"]},
            "producer": {"rollouts_drawn": counters["rollouts_drawn"], "skipped_groups": counters["skipped_groups"],
                         "loader": data["loader"], "reward_normalizer": controllers.get("reward_normalizer")},
            "learner": {"updates_done": counters["updates_done"], "kl_ctl": controllers["kl_ctl"],
                        "ptx_loader": data.get("ptx_loader")}}


def manifest(folder: Path, parts: list[Part], world: int) -> dict:
    """What a checkpoint folder holds: each part and where it is, each model folder and file with its size."""
    what = {"actor": "the actor as a plain HF model folder", "actor_ds": "DeepSpeed: weights, optimizer, LR schedule",
            "actor_adapter": "LoRA adapters (peft)", "critic": "the critic as a HF model folder",
            "critic_ds": "DeepSpeed: the critic's weights, optimizer, LR schedule"}
    contents = {}
    for child in sorted(folder.iterdir()):
        size = sum(f.stat().st_size for f in child.rglob("*") if f.is_file()) if child.is_dir() else child.stat().st_size
        contents[child.name + ("/" if child.is_dir() else "")] = {"bytes": size, "what": what.get(child.name, "")}
    listed = {p.name: [p.where(r) for r in range(world)] if p.per_rank else p.where(0) for p in parts}
    listed["models"] = [name.rstrip("/") for name in contents if name.rstrip("/") in what]
    return {"parts": listed, "contents": contents,
            "note": "trainer_state.json is written last: a folder without it is an interrupted save"}
