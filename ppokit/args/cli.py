"""``parse_cli`` (run_ppo.py's argument handling), ``--print_config`` and ``explain``."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from ppokit.algorithms import algorithm
from ppokit.errors import PpokitError

from .arguments import Arguments
from .argv import split_options
from .batch import batch_plan
from .checks import startup_checks
from .errors import ConfigError
from .fieldinfo import type_name
from .history import hub_dataset_errors
from .loader import env_world_size, load_arguments
from .run_plan import run_plan
from .translate import IGNORED, NO_EFFECT, RENAMES, suggest

USAGE = """usage: python run_ppo.py [CONFIG.{json,yaml}] [--key value ...] [key=value ...] [--print_config]

Loads the argument file, applies --key value overrides (later wins; --key=value, --flag, --no_flag,
lists as JSON or comma-separated), then Hydra-style key=value / +key=value / ~key tokens (ppokit keys,
or verl's dotted keys such as algorithm.adv_estimator=grpo, see docs/verl.md), and trains. --print_config prints the resolved arguments and the
derived batch sizes as JSON and exits. `python -m ppokit.args explain KEY` describes a key."""


def derived_section(args: Arguments, world_size: int) -> dict[str, Any]:
    """The numbers ppokit derives from ``args``: the run plan (batch sizes, run length, schedules, cadences).
    In epoch mode the prompt batches per epoch come from counting the rows of a local train file; where that
    is not possible the length is left to the run (it is printed when the data is read)."""
    plan = batch_plan(args, world_size)
    batches = None if args.max_steps > 0 else epoch_batches(args, plan.prompts_per_step)
    if args.max_steps <= 0 and batches is None:
        out = plan.to_dict()
        out["summary"] = (f"epoch mode: {args.num_train_epochs:g} epoch(s) x the prompt batches of "
                          f"{plan.prompts_per_step} that the training data yields (known once it is read)")
    else:
        out = run_plan(args, plan, batches).to_dict()
    out["max_steps_counts"] = "rollout steps"
    if not algorithm(args.rl_algorithm).needs_critic:
        out.pop("critic_lr_schedule", None)  # no critic is trained: its schedule is not part of the plan
    if args.multi_turn:
        out["tools"] = offered_tools(args)
    return out


def offered_tools(args: Arguments) -> dict[str, str] | str:
    """{tool name: "name(params): description"} of what a multi_turn run offers the model, or why none loads."""
    from ppokit.tools.declare import load_tools

    try:
        tools = load_tools(args.tools, args.tool_config_path)
    except Exception as exc:  # noqa: BLE001 - --print_config lists the problem; the run itself stops on it
        return f"the run would stop here: {exc}"
    out = {}
    for name, tool in tools.items():
        fn = tool.schema.get("function", {})
        properties = fn.get("parameters", {}).get("properties", {})
        params = ", ".join(f"{p}: {spec.get('type', 'any')}" if isinstance(spec, dict) else p
                           for p, spec in properties.items())
        out[name] = f"{name}({params}): {fn.get('description', '').strip()}".rstrip(": ")
    return out


def epoch_batches(args: Arguments, prompts_per_step: int) -> int | None:
    """Prompt batches per epoch from a local .jsonl train file's non-empty rows (before over-long prompts are
    dropped: the run's count can be lower), `train_data_size` and `dataloader_drop_last` applied; else None."""
    from pathlib import Path

    spec = str(args.train_datasets or "")
    paths = [Path(p.strip()) for p in spec.split(",") if p.strip()]
    if not paths or args.train_task_config or not all(p.suffix == ".jsonl" and p.is_file() for p in paths):
        return None
    rows = 0
    for path in paths:
        with path.open("rb") as fh:
            rows += sum(1 for line in fh if line.strip())
    if args.train_data_size:
        rows = min(rows, args.train_data_size)
    if rows == 0:
        return None
    return rows // prompts_per_step if args.dataloader_drop_last else -(-rows // prompts_per_step)


def resolved_config(args: Arguments, world_size: int | None = None) -> dict[str, Any]:
    """The arguments with an effect in this run in reading order (model, data, algorithm, batch, lengths, rewards,
    tools, ...), then 'derived' (batch plan), 'notes', and last 'no_effect_here': {why: "key=value, ..."} of the keys
    this configuration never reads (`effect.inactive`), as a JSON-able dict."""
    from .effect import folded

    world = env_world_size() if world_size is None else world_size
    shown, hidden = folded(args, args.to_dict())
    return {**shown, "derived": derived_section(args, world), "notes": list(args.notes), "no_effect_here": hidden}


class _BarSafeHandler(logging.StreamHandler):
    """Log lines through tqdm.write, so a line never lands glued to the end of a progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm
        except ImportError:
            return super().emit(record)
        from ppokit.liveline import beside_live_line

        try:
            with beside_live_line():  # never glued to a stage's "reading the prompts…"
                tqdm.write(self.format(record), file=self.stream)
        except Exception:
            self.handleError(record)


def _ensure_log_handler() -> None:
    logger = logging.getLogger("ppokit")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = _BarSafeHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("ppokit: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def parse_cli(argv: list[str]) -> Arguments:
    """Parse ``CONFIG [--key value ...]``: --help prints usage and exits 0, --print_config prints the
    resolved arguments as JSON and exits 0, a user mistake prints its message to stderr and exits 2."""
    keys = {key for key, _, _ in split_options(argv)}
    if "help" in keys or "-h" in argv:
        print(USAGE)
        sys.exit(0)
    _ensure_log_handler()
    try:
        args = _load(argv)
        hub = hub_dataset_errors(args)  # refused before any model loads; --print_config only lists them
        if hub and "print_config" not in keys:
            raise ConfigError("\n".join(f"{argv[0] if argv else 'arguments'}: {e}" for e in hub))
        args.notes.extend(f"training would stop here: {e}" for e in hub)
        if "print_config" in keys:
            startup_checks(args)  # a config that prints clean also starts
            text = json.dumps(resolved_config(args), indent=2)
    except PpokitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if "print_config" in keys:
        print(text)
        sys.exit(0)
    return args


def _load(argv: list[str]) -> Arguments:
    """The file (optional when key=value tokens are given), then --key value, then key=value tokens."""
    from .dialect import verl

    dashed, tokens = verl().split_argv(argv)
    path = None
    if dashed and not dashed[0].startswith("--"):
        path, dashed = dashed[0], dashed[1:]
    elif not tokens:
        raise ConfigError("no argument file given.\n" + USAGE)
    if not tokens:
        return load_arguments(path, argv=dashed)
    translation = verl().translate_verl(tokens, world=env_world_size())
    if translation.drop and path is None:
        raise ConfigError(f"command line: ~{translation.drop[0]} removes a key from the argument file, but no file is given.")
    args = load_arguments(path, argv=dashed, overrides={**translation.values, **translation.plain},
                          drop=tuple(translation.drop))
    args.notes.extend(translation.notes)
    for note in translation.notes:
        logging.getLogger("ppokit").info(note)
    return args


def explain(key: str) -> str:
    """A key's description, type, default, old names and ppokit note; ConfigError for unknown keys.
    A dotted verl key says which ppokit key it sets (then that key is explained)."""
    lines = []
    if "." in key:
        from .dialect import verl

        line, key = verl().describe_verl_key(key)
        if key is None:
            return line
        lines.append(line)
    if key in RENAMES:
        new, origin = RENAMES[key]
        lines.append(f"{key}: the {origin} of {new}; read as {new}.")
        key = new
    field = Arguments.model_fields.get(key)
    if field is None:
        hint = suggest(key)
        raise ConfigError(f"unknown key '{key}'" + (f"; did you mean {hint}?" if hint else
                          "; `python -m ppokit.args list` shows every valid key."))
    aliases = [old for old, (new, _) in RENAMES.items() if new == key]
    default = field.get_default(call_default_factory=True)
    lines += [f"{key}: {field.description}", f"  type: {type_name(field.annotation)}",
              f"  default: {json.dumps(default)}", f"  group: {_group_of(key)}"]
    if aliases:
        lines.append("  aliases: " + ", ".join(aliases))
    if key in IGNORED:
        lines.append(f"  ppokit: {NO_EFFECT}, because {IGNORED[key]}.")
    from .liveness import describe

    lines.append(f"  in a running Session: {describe(key)}")
    return "\n".join(lines)


def _group_of(key: str) -> str:
    from .extensions import PpokitArguments
    from .model_data import DataArguments, ModelArguments
    from .training_base import BaseTrainingArguments

    for cls in (ModelArguments, DataArguments, PpokitArguments, BaseTrainingArguments):
        if key in cls.model_fields:
            return "TrainingArguments" if cls is BaseTrainingArguments else cls.__name__
    return "TrainingArguments"
