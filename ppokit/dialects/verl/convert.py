"""Building blocks of the verl table (`table`): the entry type and the converters for mappings
that are not one-to-one (a key with a partner switch, global sizes divided over GPUs, renamed values)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ppokit.algorithms import VERL_ESTIMATORS
from ppokit.args.errors import ConfigError
from ppokit.args.extensions import VERL_KL_NAMES

SKIP = object()
"""Returned by an inverse when the key has no value to write."""


@dataclass(frozen=True)
class Ctx:
    """What a converter may look at: the verl values in play (``cfg``) and the data-parallel world size."""

    cfg: dict[str, Any]
    world: int

    def get(self, key: str, default: Any = None) -> Any:
        return self.cfg.get(key, default)


@dataclass(frozen=True)
class VerlKey:
    """One verl key: verl's default, the ppokit key it sets (None: no effect), a note, and the converter /
    inverse for mappings that are not one-to-one (see `table`)."""

    default: Any
    target: str | None
    note: str = ""
    convert: Callable[[Any, Ctx], dict[str, Any]] | None = None
    inverse: Callable[[Any], Any] | None = None
    refuse: str = ""  # non-empty: a value other than the default (or one of `inert`) stops with this sentence
    inert: tuple[Any, ...] = ()  # with `refuse`: other releases' defaults, which ask for nothing either

    def apply(self, value: Any, ctx: Ctx) -> dict[str, Any]:
        if self.refuse and value is not None and value != self.default and value not in self.inert:
            raise ConfigError(f"{self.refuse} (given {value!r}, verl's default {self.default!r})")
        if self.convert is not None:
            return self.convert(value, ctx)
        return {} if self.target is None else {self.target: value}

    def invert(self, args: Any) -> Any:
        if self.inverse is not None:
            return self.inverse(args)
        value = getattr(args, self.target) if self.target and self.convert is None else None
        return SKIP if value is None else value


@dataclass(frozen=True)
class Rule:
    """verl keys matching ``pattern`` (fnmatch: ``*`` spans dots) are accepted with no effect for ``reason``,
    or, with ``refuse``, stop with ``reason`` unless the value asks for nothing (null, false, 0, empty or
    one of ``inert``)."""

    pattern: str
    reason: str
    refuse: bool = False
    inert: tuple[Any, ...] = ()

    def check(self, key: str, value: Any) -> None:
        quiet = value in (None, False, 0, "", [], {}) or value in self.inert
        if self.refuse and not quiet:
            raise ConfigError(f"{key}={value!r}: {self.reason}.")


_TRUE, _FALSE = ("true", "yes", "on", "y"), ("false", "no", "off", "n")


def verl_bool(key: str, value: Any) -> Any:
    """``value`` of a boolean verl key as OmegaConf reads it: booleans, integers (0 is false), and the
    strings true/false/yes/no/on/off/y/n or an integer, in any case; null stays null. Anything else is
    refused naming the key (``use_kl_loss=maybe`` would otherwise be a true-ish string)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value != 0
    text = str(value).strip().lower() if isinstance(value, str) else None
    if text is not None and text.lstrip("+-").isdigit():
        return int(text) != 0
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ConfigError(f"{key}={value!r} is not a boolean; write true/false (or yes/no, on/off, 1/0).")


# ------------------------------------------------------------------------------------- converters
def _paths(value, ctx):
    items = value if isinstance(value, list) else [value]
    return ",".join(os.path.expanduser(str(p)) for p in items if p is not None) or None


def _val_files(value, ctx):
    """data.val_files -> eval_datasets, only when validation runs: where the line's whole verl config is known
    (main_ppo) and trainer.test_freq <= 0, the files are never read (verl's default path need not exist)."""
    if "trainer.test_freq" in ctx.cfg:
        try:
            runs = int(ctx.get("trainer.test_freq") or 0) > 0
        except (TypeError, ValueError):
            runs = True  # trainer.test_freq's own converter says what is wrong with it
        if not runs:
            return {}
    return {"eval_datasets": _paths(value, ctx)}


def _to(target, fn):
    return lambda value, ctx: {target: fn(value, ctx)}


def _unless_null(target, fn=lambda v, ctx: v):
    return lambda value, ctx: {} if value is None else {target: fn(value, ctx)}


def _per_gpu(target, global_key, per_gpu_key):
    """verl's deprecated global micro-batch (divided over the ranks) or its per-GPU one (wins)."""
    def convert(value, ctx):
        per_gpu, total = ctx.get(per_gpu_key), ctx.get(global_key)
        if per_gpu is not None:
            return {target: per_gpu}
        if total is None:
            return {}
        if total % ctx.world:
            raise ConfigError(f"{global_key}={total} (sequences over all GPUs) does not divide over {ctx.world} "
                              f"GPUs; use {per_gpu_key} instead.")
        return {target: max(total // ctx.world, 1)}
    return convert


def _switched(target, use_key, coef_key, default_coef):
    """A coefficient behind an on/off switch: off -> 0; on -> the coefficient (verl's default when not
    given); switch not given (run_ppo.py mode) -> the coefficient if given, else leave the file's value."""
    def convert(value, ctx):
        use, coef = verl_bool(use_key, ctx.get(use_key)), ctx.get(coef_key)
        if use is False:
            return {target: 0.0}
        if use is True:
            return {target: default_coef if coef is None else coef}
        return {} if coef is None else {target: coef}
    return convert


_kl_loss = _switched("kl_loss_coeff", "actor_rollout_ref.actor.use_kl_loss", "actor_rollout_ref.actor.kl_loss_coef", 0.001)
_kl_reward = _switched("kl_coeff", "algorithm.use_kl_in_reward", "algorithm.kl_ctrl.kl_coef", 0.001)


ESTIMATORS = VERL_ESTIMATORS  # verl's adv_estimator -> rl_algorithm (the algorithm table's verl names)


def _estimator(value, ctx):
    if value not in ESTIMATORS:
        raise ConfigError(f"algorithm.adv_estimator={value!r} is not implemented in ppokit; use one of "
                          f"{', '.join(ESTIMATORS)}.")
    return {"rl_algorithm": ESTIMATORS[value]}


SUBSTITUTE_ENGINES = ("sglang", "sglang_async", "trtllm")
"""verl's other rollout engines: the same sampling, so ppokit rolls out with vllm instead (with a note)."""


def _rollout_name(value, ctx):
    if value not in ("hf", "vllm", *SUBSTITUTE_ENGINES):
        raise ConfigError(f"actor_rollout_ref.rollout.name={value!r}: ppokit rolls out with 'hf' "
                          "(transformers.generate) or 'vllm' (sglang and trtllm lines roll out with vllm).")
    return {"rollout_engine": "vllm" if value in SUBSTITUTE_ENGINES else value}


def _warmup_style(target, optim):
    """verl's LR schedule: ``optim.lr_scheduler_type`` (v0.6+) or the older ``optim.warmup_style``; the older
    name wins when it is set and the newer one is at its default (so lines of either era mean the same)."""
    styles = {"constant": "constant_with_warmup", "cosine": "cosine"}

    def convert(value, ctx):
        old, new = ctx.get(optim + "warmup_style"), ctx.get(optim + "lr_scheduler_type")
        style = old if old is not None and new in (None, "constant") else new
        if style is None:
            return {}
        if style not in styles:
            raise ConfigError(f"{optim}lr_scheduler_type/warmup_style={style!r}: use constant or cosine.")
        return {target: styles[style]}
    return convert


def _betas(value, ctx):
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"optim.betas={value!r}: write two numbers, e.g. [0.9,0.999].")
    return {"adam_beta1": float(value[0]), "adam_beta2": float(value[1])}


def _max_samples(value, ctx):
    return {"train_data_size": None if value is None or int(value) < 0 else int(value)}


def _grad_clip(value, ctx):
    """``actor.grad_clip`` or its v0.7 twin ``actor.optim.clip_grad``: the one not at verl's 1.0 wins."""
    old, new = ctx.get("actor_rollout_ref.actor.grad_clip"), ctx.get("actor_rollout_ref.actor.optim.clip_grad")
    return {"max_grad_norm": float(new if new is not None and new != 1.0 else (1.0 if old is None else old))}


def _device(value, ctx):
    if value is not None and not str(value).startswith(("cuda", "cpu")):
        raise ConfigError(f"trainer.device={value!r}: ppokit runs on CUDA GPUs or the CPU (cuda, cuda:N, cpu).")
    return {} if value is None else {"device": value}


def _rollout_is(value, ctx):
    if value not in (None, "token", "sequence"):
        raise ConfigError(f"algorithm.rollout_correction.rollout_is={value!r}: ppokit weights by token or "
                          "sequence (or null: off).")
    return {"rollout_is": value or "off"}


def _min_lr(target, lr_key):
    return lambda value, ctx: {} if value is None else {target: float(value) * float(ctx.get(lr_key) or 0.0)}


def _logger(value, ctx):
    names = [value] if isinstance(value, str) else list(value or [])
    kept = [n for n in names if n in ("visualdl", "tensorboard")]
    if "wandb" in names and importlib.util.find_spec("wandb") is not None:
        kept.append("wandb")
    return {"report_to": kept or ["none"]}


def _run_name(value, ctx):
    project, experiment = ctx.get("trainer.project_name"), ctx.get("trainer.experiment_name")
    return {"run_name": "/".join(str(p) for p in (project, experiment) if p)} if (project or experiment) else {}


def _launch(value, ctx):
    return {}  # the launch plan (ppokit.main_ppo) reads n_gpus_per_node x nnodes


LAUNCH_KEYS = ("trainer.nnodes", "trainer.n_gpus_per_node")


def _freq(strategy_key, steps_key):
    def convert(value, ctx):
        if value is None or int(value) <= 0:
            return {strategy_key: "no"}
        return {strategy_key: "steps", steps_key: int(value)}
    return convert


def _resume(value, ctx):
    if value == "disable":
        return {"resume_from_checkpoint": None}
    if value == "resume_path":
        return {"resume_from_checkpoint": ctx.get("trainer.resume_from_path")}
    if value != "auto":
        raise ConfigError(f"trainer.resume_mode={value!r}: use auto, disable or resume_path.")
    folder = os.path.expanduser(str(ctx.get("trainer.default_local_dir") or ""))
    found = os.path.isdir(folder) and any(n.startswith("checkpoint-") for n in os.listdir(folder))
    return {"resume_from_checkpoint": True if found else None}


def _offload(target, word):
    return lambda value, ctx: {target: word} if value else {}


VERL_NAME_OF = {short: name for name, short in VERL_KL_NAMES.items()}


def _kl_name(target):
    return lambda value, ctx: {target: VERL_KL_NAMES.get(value, value)}


def _top_k(value, ctx):
    return {"top_k": max(int(value), 0)}


def _steps(value, ctx):
    return {"max_steps": -1 if value is None else int(value)}


def _lengths(target):
    def convert(value, ctx):
        out = {target: value}
        prompt, response = ctx.get("data.max_prompt_length"), ctx.get("data.max_response_length")
        if prompt is not None and response is not None:
            out["max_length"] = int(prompt) + int(response)
        return out
    return convert


def _reward_model(value, ctx):
    return {"reward_model_name_or_path": os.path.expanduser(str(value))} if ctx.get("reward_model.enable") else {}


def _custom_reward(value, ctx):
    path = ctx.get("custom_reward_function.path")
    name = ctx.get("custom_reward_function.name") or "compute_score"
    return {"reward_functions": f"{os.path.expanduser(str(path))}:{name}"} if path else {}


def _if(target, fn):
    """Inverse reading one ppokit field through ``fn`` (SKIP when fn returns SKIP)."""
    return lambda args: fn(getattr(args, target))


def _none_skip(value):
    return SKIP if value is None else value
