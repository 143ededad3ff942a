"""What PaddleNLP's argument files of every era need beyond renames: values PaddleNLP ignored or
overrode (read the same way here, each with a note) and mistakes found while parsing instead of after
minutes of model loading. ``merged_value_rules`` runs on the merged raw values (before validation),
``early_errors`` on the validated arguments."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

PADDLE_HUB_DATASETS = ("PKU-SafeRLHF", "alpaca", "stanford-alpaca")
"""PaddleNLP's registered (downloaded) datasets of E0-E2 (PADDLE_SCHEMA.md section 5.1)."""

FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


def _is_false(value: Any) -> bool:
    return value in (False, 0, None) or (isinstance(value, str) and value.strip().lower() in FALSE_WORDS)


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def merged_value_rules(values: dict[str, Any], origin: dict[str, str], order: list[str],
                       on_cpu: Callable[[], bool]) -> list[str]:
    """Adjust ``values`` (key -> raw value, newest names) in place as PaddleNLP would have read them;
    ``origin`` says which source gave each key, ``order`` lists the sources from first to last; ``on_cpu()`` says whether training runs on the CPU
    (asked only when it matters: it may import torch)."""
    notes: list[str] = []
    epochs, steps = _number(values.get("num_train_epochs")), _number(values.get("max_steps"))
    if epochs is not None and epochs <= 0 and steps is not None and steps > 0:
        del values["num_train_epochs"]
        notes.append(f"num_train_epochs={epochs:g} is ignored: max_steps={steps:g} > 0 "
                     "decides the run length (as PaddleNLP does).")
    coeff = _number(values.get("ptx_coeff"))
    if coeff and coeff > 0 and not values.get("ptx_datasets") and not values.get("ptx_task_config"):
        values["ptx_coeff"] = 0.0
        notes.append(f"ptx_coeff={coeff:g} but no ptx_datasets (or ptx_task_config) is given: PTX is off "
                     "(PaddleNLP ignored ptx_coeff without PTX data too).")
    notes += _precision_rule(values, on_cpu)
    notes += _eval_override_rule(values, origin, order)
    return notes


def _precision_rule(values: dict[str, Any], on_cpu: Callable[[], bool]) -> list[str]:
    if values.get("fp16_opt_level") != "O2":
        return []
    if not (_is_false(values.get("bf16", False)) and _is_false(values.get("fp16", False))) or not on_cpu():
        return []
    values["fp16_opt_level"] = "O1"
    return ["fp16_opt_level=O2 with bf16 and fp16 false: training runs in float32 on this CPU (read as O1; "
            "PaddleNLP refuses this combination, on a GPU ppokit does too)."]


def _eval_override_rule(values: dict[str, Any], origin: dict[str, str], order: list[str]) -> list[str]:
    """A later source's do_eval=false wins over an earlier source's evaluation_strategy (PaddleNLP warned
    and evaluated anyway); within one source PaddleNLP's rule stands and is noted."""
    strategy = values.get("evaluation_strategy", "no")
    if "do_eval" not in values or not _is_false(values["do_eval"]) or strategy in ("no", None):
        return []
    eval_source, strategy_source = origin.get("do_eval", ""), origin.get("evaluation_strategy", "")
    if eval_source in order and strategy_source in order and order.index(eval_source) > order.index(strategy_source):
        values["evaluation_strategy"] = "no"
        return [f"do_eval=false from the {eval_source} wins over evaluation_strategy='{strategy}' from "
                f"{strategy_source}: no evaluation."]
    return [f"do_eval=false but evaluation_strategy='{strategy}': evaluating anyway (PaddleNLP's rule); set "
            "evaluation_strategy to 'no' to skip evaluation."]


def early_errors(args) -> list[str]:
    """Mistakes PaddleNLP (and ppokit until now) found only after loading the models, as sentences."""
    errors = []
    if args.min_dec_len > args.max_dec_len:
        errors.append(f"min_dec_len={args.min_dec_len} is greater than max_dec_len={args.max_dec_len}: no response "
                      "can satisfy both; lower min_dec_len or raise max_dec_len.")
    if args.use_rm_server and args.reward_server:
        problem = url_problem(args.reward_server)
        if problem:
            errors.append(f"reward_server={args.reward_server!r} is not a usable URL ({problem}); write it as "
                          "http://HOST:PORT, e.g. http://127.0.0.1:8731.")
    return errors


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be posted to (None when it can)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return "it must start with http:// or https://"
    if not parts.hostname:
        return "it names no host"
    if port is None and ":" in parts.netloc.rsplit("@", 1)[-1].strip("[]").rsplit("]", 1)[-1]:
        return "the port is empty"
    return None


def hub_dataset_errors(args) -> list[str]:
    """Dataset keys that name one of PaddleNLP's downloadable hub datasets (ppokit cannot download them).
    Checked before any model loads (run_ppo.py and Session); --print_config lists them as notes."""
    errors = []
    for key in ("train_datasets", "eval_datasets", "ptx_datasets"):
        spec = getattr(args, key, None)
        parts = spec if isinstance(spec, (list, tuple)) else str(spec or "").split(",")
        for part in (p.strip() for p in parts if p):
            if part.split("/")[0].split(":")[0] in PADDLE_HUB_DATASETS and not os.path.exists(part):
                errors.append(f"{key}='{part}' is one of PaddleNLP's hub datasets, which ppokit does not download; "
                              "export it to a .jsonl file with 'src' and 'tgt' fields and give that path"
                              + (", or set ptx_coeff to 0" if key == "ptx_datasets" else "") + ".")
    return errors


def check_hub_datasets(args) -> None:
    """Raise ConfigError naming every hub dataset key (called before any model loads)."""
    from .errors import ConfigError

    errors = hub_dataset_errors(args)
    if errors:
        raise ConfigError("\n".join(errors))
