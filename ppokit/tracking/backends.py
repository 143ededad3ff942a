"""Where metrics go besides the JSONL files: VisualDL (default), TensorBoard and wandb when installed.

Each backend is a plain class satisfying the ``Backend`` protocol; the Tracker hands them finite
numbers only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Protocol

KNOWN_BACKENDS = ("visualdl", "tensorboard", "wandb")


def note(message: str) -> None:
    """A one-line note to the user on stderr (visible in consoles and notebooks alike)."""
    print(f"ppokit: {message}", file=sys.stderr)


class Backend(Protocol):
    name: str

    def scalars(self, step: int, metrics: dict[str, float]) -> None: ...

    def text(self, step: int, tag: str, text: str) -> None: ...

    def hparams(self, hparams: dict[str, int | float | str], metric_names: list[str]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def resolve_report_to(report_to: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """Normalise PaddleNLP's ``report_to``: None -> ["visualdl"], "all" -> every installed one, "none" -> []."""
    if report_to is None:
        return ["visualdl"]
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    names = [n.strip().lower() for n in names if n and n.strip()]
    if "none" in names:
        return []
    if "all" in names:
        return [n for n in KNOWN_BACKENDS if _installed(n)]
    unknown = [n for n in names if n not in KNOWN_BACKENDS]
    if unknown:
        raise ValueError(
            f"report_to has {', '.join(repr(n) for n in unknown)}, which ppokit does not know; "
            f"use any of {', '.join(KNOWN_BACKENDS)}, or 'all' or 'none'."
        )
    return list(dict.fromkeys(names))


def _installed(name: str) -> bool:
    module = {"visualdl": "visualdl", "tensorboard": "tensorboard", "wandb": "wandb"}[name]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class TensorBoardBackend:
    """Scalars and text through ``torch.utils.tensorboard.SummaryWriter`` (needs the tensorboard package)."""

    name = "tensorboard"

    def __init__(self, logdir: Path, purge_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir), purge_step=purge_step)

    def scalars(self, step: int, metrics: dict[str, float]) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)

    def text(self, step: int, tag: str, text: str) -> None:
        self.writer.add_text(tag, text, step)

    def hparams(self, hparams: dict[str, int | float | str], metric_names: list[str]) -> None:
        rows = "\n".join(f"| {k} | {v} |" for k, v in hparams.items())
        self.writer.add_text("hparams", "| argument | value |\n|---|---|\n" + rows, 0)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbBackend:
    """Scalars, text and config through an installed ``wandb`` (project from $WANDB_PROJECT, default ppokit)."""

    name = "wandb"

    def __init__(self, wandb_module, output_dir: Path, run_name: str | None, resuming: bool):
        self.wandb = wandb_module
        self.run = wandb_module.init(
            project=os.environ.get("WANDB_PROJECT", "ppokit"),
            name=run_name,
            dir=str(output_dir),
            resume="allow" if resuming else None,
        )

    def scalars(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def text(self, step: int, tag: str, text: str) -> None:
        self.run.log({tag: self.wandb.Html(f"<pre>{_escape(text)}</pre>")}, step=step)

    def hparams(self, hparams: dict[str, int | float | str], metric_names: list[str]) -> None:
        self.run.config.update(hparams, allow_val_change=True)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.run.finish()


def _escape(text: str) -> str:
    import html

    return html.escape(text)


def open_backends(
    names: list[str],
    run_dir: Path,
    display_name: str,
    output_dir: Path,
    run_name: str | None,
    resume_step: int | None,
) -> list[Backend]:
    """Start each named backend writing into ``run_dir`` (this run's folder of logging_dir); one that is not
    installed is skipped with a one-line note."""
    from ppokit.tracking.vdl import VisualDLBackend

    backends: list[Backend] = []
    for name in names:
        if name == "visualdl":
            try:
                backends.append(VisualDLBackend(run_dir, display_name=display_name))
            except ImportError as exc:
                note(
                    f"VisualDL could not be imported ({exc}); reinstall it with pip install visualdl. Skipping it."
                )
        elif name == "tensorboard":
            try:
                purge = None if resume_step is None else resume_step + 1
                backends.append(TensorBoardBackend(run_dir, purge_step=purge))
            except ImportError:
                note(
                    "report_to asks for tensorboard, which is not installed (pip install tensorboard); skipping it."
                )
        elif name == "wandb":
            try:
                import wandb
            except ImportError:
                note("report_to asks for wandb, which is not installed (pip install wandb); skipping it.")
                continue
            backends.append(WandbBackend(wandb, output_dir, run_name, resuming=resume_step is not None))
    return backends


def hparams_for_backends(hparams: dict) -> dict[str, int | float | str]:
    """The scalar-valued entries of a dict (bools as text, None/lists/dicts dropped), for hparams panels."""
    out: dict[str, int | float | str] = {}
    for key, value in hparams.items():
        if isinstance(value, bool):
            out[str(key)] = str(value)
        elif isinstance(value, (int, float, str)):
            out[str(key)] = value
        elif getattr(value, "value", None) is not None and isinstance(value.value, (int, float, str)):
            out[str(key)] = value.value  # enums
    return out


# The keys a run is compared by, shown after the ones a user changed (VisualDL's hyper-parameter table).
CORE_HPARAMS = ("actor_model_name_or_path", "rl_algorithm", "learning_rate", "rollout_n", "global_batch_size",
                "global_mini_batch_size", "update_iters", "max_steps", "max_dec_len", "temperature",
                "kl_loss_coeff", "kl_coeff", "lr_scheduler_type", "warmup_steps", "do_eval", "seed")
WHERE_KEYS = ("output_dir", "logging_dir", "run_name")  # where a run writes: the trial's name says it


def compact_hparams(scalars: dict[str, int | float | str], info: dict) -> dict[str, int | float | str]:
    """The hyper-parameters a comparison of runs needs: the keys changed from their defaults first (ranked as
    CORE_HPARAMS, then in argument order), then the unchanged CORE_HPARAMS; keys with no effect here and the
    output folders are left out. Without defaults (a plain dict was logged) every key is kept, in order."""
    defaults = info.get("defaults")
    if not defaults:
        return dict(scalars)
    skip = set(info.get("no_effect", ())) | set(info.get("inactive", ())) | set(WHERE_KEYS)
    default_scalars = hparams_for_backends(defaults)
    given = set(info.get("given", scalars))  # derived values (decay_steps, per-device sizes) are not changes
    changed = [k for k in scalars if k not in skip and k in given and
               (k not in defaults or default_scalars.get(k) != scalars[k])]
    rank = {k: i for i, k in enumerate(CORE_HPARAMS)}
    changed.sort(key=lambda k: rank.get(k, len(rank)))
    rest = [k for k in CORE_HPARAMS if k in scalars and k not in changed and k not in skip]
    return {k: scalars[k] for k in changed + rest}


def dump_args(hparams: dict) -> str:
    """args.json text: every argument, nested values kept, non-JSON values as text."""
    from ppokit.tracking.jsonl import to_jsonable

    return json.dumps(to_jsonable(hparams), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


ARGS_INFO = "args_info.json"
_NO_EFFECT = re.compile(r"no effect (here|in ppokit)|informational only", re.I)


def args_info(model) -> dict:
    """{"defaults": {key: default}, "no_effect": [keys], "inactive": {key: why}} of a pydantic arguments model ({}
    for a dict): what the report needs to put the changed keys first and leave out the ones that do nothing here
    (no_effect: in ppokit at all; inactive: in this configuration, `ppokit.args.effect.inactive`)."""
    from ppokit.tracking.jsonl import to_jsonable

    fields = getattr(type(model), "model_fields", None)
    if not fields:
        return {}
    defaults, no_effect = {}, []
    for key, field in fields.items():
        try:
            defaults[key] = to_jsonable(field.get_default(call_default_factory=True))
        except Exception:  # a default that needs other fields (a validated factory): compare nothing
            continue
        if _NO_EFFECT.search(field.description or ""):
            no_effect.append(key)
    info = {"defaults": defaults, "no_effect": no_effect}
    if isinstance(getattr(model, "given", None), frozenset):  # what the user set, not what ppokit derived
        info["given"] = sorted(model.given)
    if hasattr(model, "rl_algorithm"):
        from ppokit.args.effect import inactive

        info["inactive"] = {k: why for k, why in inactive(model).items() if k not in no_effect}
    return info
