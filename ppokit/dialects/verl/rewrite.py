"""``python -m ppokit.args translate FILE_OR_LINE --to verl|paddle``: one run written in the other dialect.

* to verl: a PaddleNLP/ppokit argument file becomes a ``python3 -m verl.trainer.main_ppo`` line that means in verl
  what the file means here: each verl key of the table whose ppokit key has an effect in this configuration and
  whose value differs from verl's default. The line is read back with ppokit's verl reader; the keys with an effect
  that it cannot say (verl has no name for them, or no value that means ppokit's) are named in a note, not
  written as keys verl lacks. ``python -m ppokit.main_ppo`` runs the same tokens here.
* to paddle: a verl line (``python3 -m verl.trainer.main_ppo ...`` or ``ppokit.main_ppo``, optionally
  with ``--config-path/--config-name``) or a nested verl YAML becomes a flat PaddleNLP-style JSON.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import Any

from ppokit.args.arguments import Arguments
from ppokit.args.batch import batch_mode, batch_plan
from ppokit.args.effect import inactive
from ppokit.args.errors import ConfigError
from ppokit.args.loader import env_world_size, load_arguments, read_config_file

from .hydra import looks_like_override, resolve_interpolations
from .overrides import VERL_ROOTS, read_verl_yaml, translate_verl, verl_defaults
from .table import SKIP, TABLE

ENTRY = "python3 -m verl.trainer.main_ppo"  # the same tokens run here after `python -m ppokit.main_ppo`
PER_DEVICE_MODE_KEYS = frozenset({"global_batch_size", "global_mini_batch_size", "global_gen_batch_size",
                                  "gradient_accumulation_steps", "per_device_rollout_batch_size"})
"""Fields that differ between a per-device file and its global rewrite while the batch plan is the same."""


def hydra_literal(value: Any) -> str:
    """``value`` written so that Hydra (and ppokit.dialects.verl.hydra) reads it back unchanged."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_literal(v) for v in value) + "]"
    text = str(value)
    from .hydra import parse_value

    if parse_value(text) != text or any(c in text for c in " ,[]{}'\"=:"):
        return '"' + text.replace('"', '\\"') + '"'
    return text


def _parse_back(tokens: list[str], world: int) -> Arguments:
    translation = translate_verl(tokens, verl_defaults(), world=world)
    values = {k: v for k, v in {**translation.values, **translation.plain}.items() if k not in translation.drop}
    return load_arguments(overrides=values)


def to_verl_tokens(path: str, notes: list[str] | None = None) -> list[str]:
    """Override tokens that mean in verl what the argument file ``path`` means here (on the launcher's world size):
    each verl key whose ppokit key has an effect in this configuration (`effect.inactive`: no KL-in-reward switch
    for GRPO, no critic keys without a critic) and whose value differs from verl's default. The keys with an effect
    that verl has no name for are left out, each named in ``notes`` with its value."""
    args = load_arguments(path)
    world = env_world_size()
    off = inactive(args)
    defaults = resolve_interpolations(verl_defaults())
    tokens = ["trainer.nnodes=1", f"trainer.n_gpus_per_node={world}"]
    for key, entry in TABLE.items():
        if entry.target in off:
            continue
        value = entry.invert(args)
        if value is not SKIP and value != defaults.get(key):
            tokens.append(f"{key}={hydra_literal(value)}")
    back_args = _parse_back(tokens, world)
    per_device = batch_mode(args) == "per_device"
    lacking = {k: v for k, v in unexpressed(args, back_args).items() if not (per_device and k in PER_DEVICE_MODE_KEYS)}
    out = notes if notes is not None else []
    if lacking:
        said = back_args.to_dict()
        out.append(f"{path}: verl's keys cannot say {', '.join(f'{k}={json.dumps(v)}' for k, v in lacking.items())}; "
                   "left out of the line, which runs with " +
                   ", ".join(f"{k}={json.dumps(said.get(k))}" for k in lacking) + " instead.")
    if per_device:  # verl has only global batch sizes: the same plan, written in global units
        same = {**batch_plan(back_args, world).to_dict(), "mode": "per_device"} == batch_plan(args, world).to_dict()
        if not same:
            raise ConfigError(f"{path}: its per-device batch sizes have no global equivalent on {world} rank(s).")
        out.append(f"{path}: per-device batch sizes (PaddleNLP E0-E4) are written as verl's global ones "
                   f"(data.train_batch_size, ppo_mini_batch_size): the same batch plan on {world} rank(s).")
    return tokens


def unexpressed(args: Arguments, back: Arguments) -> dict[str, Any]:
    """{key: value} of the keys with an effect in ``args``'s configuration that the verl line, read back as
    ``back``, does not give the same value (keys without an effect on either side do not count)."""
    off = set(inactive(args)) | set(inactive(back))
    wanted, got = args.to_dict(), back.to_dict()
    return {k: v for k, v in wanted.items() if k not in off and got.get(k) != v}


def to_paddle_values(tokens: list[str], config_path: str | None = None, config_name: str | None = None) -> dict:
    """A flat PaddleNLP-style config equivalent to a verl line (verl's defaults or YAML, then tokens)."""
    base = read_verl_yaml(config_path or ".", config_name or "ppo_trainer") if (config_path or config_name) \
        else verl_defaults()
    translation = translate_verl(tokens, base)
    values = {k: v for k, v in {**translation.values, **translation.plain}.items() if k not in translation.drop}
    with_world = {}
    if translation.world_size > 1:
        with_world["comment"] = (f"run with: python -m ppokit.launch --nproc_per_node {translation.world_size} "
                                 "run_ppo.py THIS_FILE (batch sizes assume that many ranks)")
    return {**with_world, **values}


def _split_line(line: str) -> tuple[list[str], str | None, str | None]:
    """Override tokens and --config-path/--config-name of a shell line (program name and python dropped)."""
    words = shlex.split(line.replace("\\\n", " "))
    tokens, path, name = [], None, None
    it = iter(words)
    for word in it:
        flag, eq, value = word.partition("=")
        if flag in ("--config-path", "-cp", "--config-name", "-cn"):
            value = value if eq else next(it, "")
            path, name = (value, name) if flag in ("--config-path", "-cp") else (path, value)
        elif looks_like_override(word):
            tokens.append(word)
    return tokens, path, name


def translate(source: str, to: str) -> str:
    """The text `python -m ppokit.args translate SOURCE --to TO` prints."""
    if to not in ("verl", "paddle"):
        raise ConfigError(f"--to {to!r}: choose verl or paddle.")
    is_file = os.path.isfile(source)
    if to == "verl":
        if not is_file:
            raise ConfigError(f"{source}: no such argument file; --to verl translates a PaddleNLP/ppokit JSON or YAML.")
        notes: list[str] = []
        tokens = to_verl_tokens(source, notes)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        return " \\\n  ".join([ENTRY, *(shlex.quote(t) for t in tokens)])
    if is_file:
        tree = read_config_file(source)
        if not set(tree) & set(VERL_ROOTS):
            raise ConfigError(f"{source}: not a nested verl config (no data/actor_rollout_ref/trainer... sections).")
        folder, name = os.path.split(os.path.abspath(source))
        values = to_paddle_values([], folder, name)
    else:
        tokens, path, name = _split_line(source)
        if not tokens and path is None:
            raise ConfigError(f"{source!r}: neither a file nor a line of key=value overrides.")
        values = to_paddle_values(tokens, path, name)
    return json.dumps(values, indent=2)
