"""``Arguments``: the one flat model composed of the four groups."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, PrivateAttr

from .extensions import PpokitArguments
from .model_data import DataArguments, ModelArguments
from .training_base import BaseTrainingArguments
from .training_rl import RLTrainingArguments

GROUP_ALGORITHMS = frozenset({"grpo", "drgrpo", "dapo", "rloo", "reinforce_plus_plus_baseline"})
"""Algorithms whose advantages compare the rollout_n responses of one prompt (need rollout_n >= 2)."""

KL_IN_REWARD_ALGORITHMS = frozenset({"ppo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"})
"""Algorithms that put kl_coeff x KL into the reward (PaddleNLP's use_kl_in_reward)."""


class TrainingArguments(RLTrainingArguments, BaseTrainingArguments):
    """PaddleNLP's TrainingArguments: its RL subclass fields plus the base fields RL configs use."""


class Arguments(ModelArguments, DataArguments, TrainingArguments, PpokitArguments):
    """Every ppokit argument, flat. Build it with ``load_arguments`` (which applies PaddleNLP's
    post-init rules and the consistency checks); assignment is validated, so a notebook can write
    ``args.temperature = 0.7``. ``notes`` lists one-line remarks about the input (renamed keys,
    PaddleNLP-only switches, values ppokit changed)."""

    model_config = ConfigDict(validate_assignment=True, extra="forbid", coerce_numbers_to_str=True)

    _notes: list[str] = PrivateAttr(default_factory=list)

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
        return self.rl_algorithm in GROUP_ALGORITHMS

    @property
    def use_critic(self) -> bool:
        """True when a critic (value model) is trained: only for ppo."""
        return self.rl_algorithm == "ppo"

    @property
    def use_kl_in_reward(self) -> bool:
        """True when kl_coeff x KL goes into the reward (ppo and reinforce_plus_plus variants)."""
        return self.rl_algorithm in KL_IN_REWARD_ALGORITHMS

    @property
    def needs_reference(self) -> bool:
        """True when a reference model is needed (a KL term with a non-zero coefficient)."""
        return self.kl_loss_coeff > 0 or (self.use_kl_in_reward and self.kl_coeff > 0)

    @property
    def zero_stage(self) -> int:
        """DeepSpeed ZeRO stage named by ``sharding``: '' -> 0, 'stage2' -> 2 ('offload' words ignored)."""
        stages = [int(w[-1]) for w in self.sharding.split() if w in ("stage1", "stage2", "stage3")]
        return max(stages, default=0)

    @property
    def needs_labels(self) -> bool:
        """True when records must carry a reference answer (reward server or rule reward)."""
        return self.use_rm_server or self.use_rule_reward
