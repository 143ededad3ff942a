"""verl's entry point, same trainer: ``python -m ppokit.main_ppo [--config-path DIR --config-name NAME]
key=value ... [--print_config]``.

verl's documented defaults (or the nested YAML), then the Hydra overrides, go through the one table in
``ppokit.dialects.verl.table`` onto ppokit's arguments; ``Session.train()`` then runs exactly as under
run_ppo.py. ``trainer.n_gpus_per_node x trainer.nnodes`` is the launch plan: started outside a launcher
with more than one process planned, this module starts itself once per GPU through torchrun.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from contextlib import contextmanager
from typing import Any

from ppokit.args import ConfigError
from ppokit.args.arguments import Arguments
from ppokit.args.cli import _ensure_log_handler, resolved_config
from ppokit.args.loader import _log_notes, load_arguments
from ppokit.dialects.verl.fit import GPUS_KEY, fit_gpus, in_verl_terms
from ppokit.dialects.verl.overrides import (
    VerlTranslation,
    read_verl_yaml,
    split_argv,
    translate_verl,
    verl_defaults,
)
from ppokit.dialects.verl.table import TABLE

USAGE = """usage: python -m ppokit.main_ppo [--config-path DIR --config-name NAME] key=value ... [--print_config]

verl's launch line with `python3 -m verl.trainer.main_ppo` replaced: verl's defaults (or the YAML named by
--config-path/--config-name), then Hydra overrides (key=value, +key=value, ~key; lists as '[a,b]', null,
true/false). Plain keys without a dot are ppokit's own (max_steps=5). --print_config prints the resolved
arguments as run_ppo.py does, plus what each verl key set and the launch plan. See docs/verl.md."""

_OPTIONS = {"--config-path": "config_path", "-cp": "config_path", "--config-name": "config_name",
            "-cn": "config_name"}


def _options(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Split --config-path/--config-name/--print_config/--help off; the rest are overrides."""
    found: dict[str, Any] = {}
    dashed, overrides = split_argv(argv)
    rest = iter(dashed)
    for token in rest:
        name, eq, value = token.partition("=")
        if name in _OPTIONS:
            found[_OPTIONS[name]] = value if eq else next(rest, None)
            if found[_OPTIONS[name]] is None:
                raise ConfigError(f"command line: {name} needs a value.")
        elif token in ("--print_config", "--help", "-h"):
            found[token.lstrip("-")] = True
        elif token in ("--cfg", "-c"):  # Hydra's `--cfg job` prints the config
            found["print_config"] = next(rest, "job") or True
        else:
            raise ConfigError(f"command line: unexpected '{token}'; verl options are written key=value "
                              "(e.g. data.train_batch_size=128), ppokit keys too (max_steps=5).")
    return found, overrides


@contextmanager
def _world_size(n: int):
    """Batch rules read WORLD_SIZE; outside a launcher, plan for the processes that will be started."""
    if os.environ.get("WORLD_SIZE"):
        yield
        return
    os.environ["WORLD_SIZE"] = str(n)
    try:
        yield
    finally:
        os.environ.pop("WORLD_SIZE", None)


def parse_main_ppo(argv: list[str]) -> tuple[Arguments, VerlTranslation, dict[str, Any]]:
    """(arguments, translation, options) for a main_ppo command line; ConfigError on a user mistake."""
    options, tokens = _options(argv)
    if "config_path" in options or "config_name" in options:
        base = read_verl_yaml(options.get("config_path") or ".", options.get("config_name") or "ppo_trainer")
    else:
        base = verl_defaults()
    base, fitted = fit_gpus(base, tokens, TABLE[GPUS_KEY].default)  # verl's default 8 GPUs on a smaller machine
    translation = translate_verl(tokens, base)
    if fitted:
        translation.notes.insert(0, fitted)
    values = {k: v for k, v in {**translation.values, **translation.plain}.items() if k not in translation.drop}
    try:
        with _world_size(translation.world_size):
            args = load_arguments(overrides=values)
    except ConfigError as exc:  # ppokit's keys in the message: say which verl keys set them
        raise ConfigError(in_verl_terms(str(exc), translation)) from None
    args.notes.extend(translation.notes)
    _log_notes(translation.notes)  # what --print_config lists is also said when the line trains
    return args, translation, options


def launch_plan(translation: VerlTranslation, argv: list[str]) -> dict[str, Any]:
    """How many processes trainer.nnodes x trainer.n_gpus_per_node asks for, and the command that starts them."""
    cfg = translation.cfg
    nodes, gpus = int(cfg.get("trainer.nnodes") or 1), int(cfg.get("trainer.n_gpus_per_node") or 1)
    plan: dict[str, Any] = {"nnodes": nodes, "n_gpus_per_node": gpus, "world_size": nodes * gpus,
                            "launched": bool(os.environ.get("WORLD_SIZE"))}
    if nodes > 1:
        plan["command"] = (f"run on each node: python -m ppokit.launch --nnodes {nodes} --nproc_per_node {gpus} "
                           "--master HOST:PORT --rank NODE_RANK SCRIPT ... (see docs/scaling.md)")
    elif gpus > 1 and not plan["launched"]:
        plan["command"] = shlex.join(_launch_command(gpus, argv)[0])
    return plan


def _launch_command(gpus: int, argv: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(command, environment, launcher notes) starting this module on ``gpus`` processes."""
    from ppokit.launch import LaunchSpec, build_command, detect_machine, launch_notes

    # torchrun's -m runs this module in every process, as `python -m` does here
    passed = tuple(a for a in argv if a != "--print_config")
    spec = LaunchSpec(script="-m", script_args=("ppokit.main_ppo", *passed), nproc_per_node=gpus)
    machine = detect_machine()
    command, env = build_command(spec, os.environ, machine)
    return command, env, launch_notes(spec, machine)


def _print_config(args: Arguments, translation: VerlTranslation, argv: list[str]) -> None:
    out = resolved_config(args, translation.world_size)
    out["verl"] = {"keys": translation.mapping, "launch": launch_plan(translation, argv)}
    print(json.dumps(out, indent=2, default=str))


def user_errors() -> tuple[type[BaseException], ...]:
    from ppokit.checkpoint import CheckpointError
    from ppokit.data import DataError
    from ppokit.errors import PpokitError
    from ppokit.launch import LaunchError
    from ppokit.models import ModelNotFoundError
    from ppokit.rewards import RewardError, RewardServerError
    from ppokit.tasks import TaskError

    return (ConfigError, CheckpointError, DataError, LaunchError, ModelNotFoundError, RewardError,
            RewardServerError, TaskError, PpokitError)


def main(argv: list[str] | None = None) -> int:
    """Parse, then print (--print_config), start the planned processes, or train; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help" in argv or "-h" in argv:
        print(USAGE)
        return 0
    args = translation = None
    _ensure_log_handler()
    try:
        args, translation, options = parse_main_ppo(argv)
        if options.get("print_config"):
            _print_config(args, translation, argv)
            return 0
        plan = launch_plan(translation, argv)
        if plan["nnodes"] > 1 and not plan["launched"]:
            raise ConfigError(f"trainer.nnodes={plan['nnodes']}: start every node yourself; {plan['command']}.")
        if plan["world_size"] > 1 and not plan["launched"]:
            from ppokit.launch import run_command

            command, env, notes = _launch_command(plan["world_size"], argv)
            for note in notes:
                print(f"ppokit.main_ppo: note: {note}", file=sys.stderr)
            print(f"ppokit.main_ppo: starting {plan['world_size']} processes (trainer.nnodes x trainer.n_gpus_per_node): "
                  f"{shlex.join(command)}", file=sys.stderr)
            return run_command(command, env)
        from ppokit.session import Session  # entry point, like run_ppo.py

        Session(args).train()
    except user_errors() as exc:
        text = str(exc) if "In verl's keys:" in str(exc) else in_verl_terms(str(exc), translation)
        print(f"error: {text}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)  # 143 after SIGTERM's checkpoint
    except KeyboardInterrupt as exc:  # Ctrl-C (130) or a second SIGTERM (143): one sentence, out at once
        from ppokit.checkpoint.signals import stop_sentence
        from ppokit.errors import exit_at_once

        exit_at_once(*stop_sentence(exc, getattr(args, "output_dir", None)))
    return 0


if __name__ == "__main__":
    code = main()
    from ppokit.engine import exit_launched_process  # here: --print_config must not import torch

    exit_launched_process(code)
