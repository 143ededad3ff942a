"""``Arguments``: the one flat model composed of the four groups."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import ConfigDict, PrivateAttr, ValidationError

from ppokit.algorithms import algorithm

from .errors import ConfigError
from .extensions import PpokitArguments
from .fieldinfo import type_name
from .model_data import DataArguments, ModelArguments
from .training_base import BaseTrainingArguments
from .training_rl import RLTrainingArguments


class AssignmentError(ConfigError, ValueError):
    """A value assigned to an argument (``s.args.temperature = -1``) that it cannot take; one sentence."""


class TrainingArguments(RLTrainingArguments, BaseTrainingArguments):
    """PaddleNLP's TrainingArguments: its RL subclass fields plus the base fields RL configs use."""


class Arguments(ModelArguments, DataArguments, TrainingArguments, PpokitArguments):
    """Every ppokit argument, flat. Build it with ``load_arguments`` (which applies PaddleNLP's
    post-init rules and the consistency checks); assignment is validated, so a notebook can write
    ``args.temperature = 0.7``. ``notes`` lists one-line remarks about the input (renamed keys,
    PaddleNLP-only switches, values ppokit changed)."""

    model_config = ConfigDict(validate_assignment=True, extra="forbid", coerce_numbers_to_str=True)

    _notes: list[str] = PrivateAttr(default_factory=list)
    _guard: Any = PrivateAttr(default=None)  # a running Session's check of assignments (`liveness.guard`)
    _given: frozenset | None = PrivateAttr(default=None)  # keys the user gave (file, argv, overrides, assignments)

    def __setattr__(self, name: str, value: Any) -> None:
        """Validated assignment; a refused value is one sentence (AssignmentError), not a pydantic report."""
        if not name.startswith("_") and name not in type(self).model_fields and not hasattr(type(self), name):
            close = difflib.get_close_matches(name, list(type(self).model_fields), n=1)
            raise AssignmentError(f"there is no argument '{name}'" + (f"; did you mean {close[0]}?" if close else
                                  "; `python -m ppokit.args list` shows every key."))
        if self._guard is not None and not name.startswith("_"):
            return self._guard(self, name, value)
        self._assign(name, value)

    @property
    def given(self) -> frozenset:
        """The keys the user gave (the file, the command line, overrides, assignments), not the ones ppokit
        derived from them (max_src_len, decay_steps, per-device sizes); all set keys when not recorded."""
        return self._given if self._given is not None else frozenset(self.model_fields_set)

    def _assign(self, name: str, value: Any) -> None:
        if self._given is not None and not name.startswith("_"):
            self._given = self._given | {name}
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = type(self).model_fields.get(name)
            expected = type_name(field.annotation) if field is not None else "a valid value"
            detail = "" if expected.startswith("one of") else f" ({error['msg']})"
            raise AssignmentError(f"{name}={value!r} is not valid: expected {expected}{detail}; "
                                  f"{name} is still {getattr(self, name)!r}.") from None

    def changed(self) -> dict[str, Any]:
        """{key: value} of the keys whose value differs from the schema's default, in the schema's order."""
        out = {}
        for key, field in type(self).model_fields.items():
            try:
                default = field.get_default(call_default_factory=True)
            except Exception:  # a default that needs other fields: count the key as changed
                default = object()
            value = getattr(self, key)
            if value != default:
                out[key] = value
        return out

    def __repr__(self) -> str:
        """Short: the keys that differ from the defaults (model, algorithm and data first), then a count of the
        rest; `args.to_dict()` has every key, `python -m ppokit.args explain KEY` explains one."""
        changed = self.changed()
        first = ("actor_model_name_or_path", "rl_algorithm", "train_datasets", "eval_datasets")
        keys = [k for k in first if k in changed] + [k for k in changed if k not in first]
        lines, line = [], ""
        for item in (f"{k}={changed[k]!r}" for k in keys):
            if line and len(line) + len(item) > 104:
                lines.append(line.rstrip(", "))
                line = ""
            line += item + ", "
        if line:
            lines.append(line.rstrip(", "))
        rest = len(type(self).model_fields) - len(changed)
        return (f"Arguments({len(changed)} keys differ from the defaults:\n  " + "\n  ".join(lines)
                + f"\n  and {rest} keys at their defaults: args.to_dict() has them all)")

    __str__ = __repr__

    @property
    def notes(self) -> list[str]:
        """One-line notes collected while loading (shared list; append to add)."""
        return self._notes

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain JSON-able dict."""
        return self.model_dump(mode="json")

    def to_config(self) -> dict[str, Any]:
        """Only the keys that were given, derived or assigned, as a JSON-able dict: saving this (not
        ``to_dict``) and loading it back with ``load_arguments(overrides=...)`` keeps the batch mode."""
        return self.model_dump(mode="json", exclude_unset=True)

    @property
    def group_algorithm(self) -> bool:
        """True for algorithms with group-relative baselines (grpo, drgrpo, dapo, rloo, rf++ baseline)."""
        return algorithm(self.rl_algorithm).needs_groups

    @property
    def use_kl_in_reward(self) -> bool:
        """True when kl_coeff x KL goes into the reward (ppo and reinforce_plus_plus variants)."""
        return algorithm(self.rl_algorithm).kl_in_reward

    @property
    def needs_reference(self) -> bool:
        """True when a reference model is needed (a KL term with a non-zero coefficient)."""
        return self.kl_loss_coeff > 0 or (self.use_kl_in_reward and self.kl_coeff > 0)
