"""What a resume checks and repairs beyond loading: unreadable checkpoint files, optimizer settings that changed
since the checkpoint, and newer checkpoints that an older resume leaves off the run's line.

- A checkpoint whose trainer_state.json, DeepSpeed state or RNG state cannot be read is a
  `DamagedCheckpointError` naming the file; `auto` then falls back to the next older checkpoint, and all
  ranks agree on which (`readable_on_every_rank`): a file damaged on one rank's view moves every rank on.
- DeepSpeed restores the optimizer's hyper-parameters (lr, betas, eps, weight_decay) and the LR schedule's
  base value from the checkpoint. A changed `learning_rate` (or Adam key, critic ones too) would be logged as
  changed yet ignored; `reapply_optimizer_settings` puts the values the current arguments built back, and
  the schedule continues from the restored step with the new base value.
- Resuming from an older checkpoint moves the newer ones to `output_dir/abandoned/` with a note, so `auto`,
  `Session.resume` and export only ever see the run's current line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path

from ppokit.engine import all_reduce_sum, barrier, rank, world_size
from ppokit.errors import PpokitError

logger = logging.getLogger("ppokit")

STATE_FILE = "trainer_state.json"
ABANDONED_DIR = "abandoned"
ABANDONED_NOTE = "NOTE.txt"
HYPER_KEYS = ("betas", "eps", "weight_decay")


class DamagedCheckpointError(PpokitError):
    """A checkpoint file cannot be read (empty, truncated, not JSON, not a DeepSpeed state). The message is the
    problem, then what to do, chosen from what the checkpoint's folder holds (`damaged_advice`): an older checkpoint
    is suggested only when one exists, 'auto' only when the resume was not already automatic."""

    def __init__(self, problem: str, where: Path | None = None, remedy: str = "", auto: bool = False,
                 tried: tuple[Path, ...] = ()):
        self.problem, self.folder, self.remedy = problem, checkpoint_folder(where), remedy
        super().__init__(f"{problem}; the checkpoint is damaged: {damaged_advice(self.folder, remedy, auto, tried)}")

    def under_auto(self, tried) -> DamagedCheckpointError:
        """The same problem after resume_from_checkpoint=auto tried `tried` (every checkpoint) and could read none."""
        return DamagedCheckpointError(self.problem, self.folder, self.remedy, auto=True, tried=tuple(tried))


def checkpoint_folder(where: Path | None) -> Path | None:
    """The checkpoint-<step> folder `where` is (or is inside of); None when it is in none."""
    for folder in [where, *where.parents] if where is not None else []:
        if re.fullmatch(r"checkpoint-\d+", folder.name):
            return folder
    return None


def damaged_advice(folder: Path | None, remedy: str = "", auto: bool = False, tried: tuple[Path, ...] = ()) -> str:
    """What to do about the damaged checkpoint `folder`, by what exists: its own `remedy` first (e.g. copy a
    folder back), then an older checkpoint when there is one — or, when there is none (or `auto` already tried them
    all), restoring the files or starting afresh."""
    options = [remedy] if remedy else []
    fresh = "restore its files from a copy, or start from step 0 in another output_dir"
    if folder is None:
        return "; or ".join([*options, "resume from an older checkpoint-<step> or with 'auto'"])
    if auto:
        others = [p.name for p in tried if p.name != folder.name]
        what = (f"resume_from_checkpoint=auto could read none of the checkpoints in {folder.parent} "
                f"({', '.join([folder.name, *others])})" if others else f"it is the only checkpoint in {folder.parent}")
        return f"{what}, so there is no older one to fall back to; " + "; or ".join([*options, fresh])
    older = [p.name for p in reversed(complete_checkpoints(folder.parent)) if _step(p) < _step(folder)]
    if older:
        return "; or ".join([*options, f"resume an older one ({', '.join(older)}), or with 'auto', which falls back "
                                       "to the newest readable one"])
    return f"{folder.parent} holds no older checkpoint; " + "; or ".join([*options, fresh])


def complete_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete `checkpoint-<step>` folders in `output_dir` (those with trainer_state.json), oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if m and (child / STATE_FILE).is_file():
            found.append((int(m.group(1)), child))
    return [p for _, p in sorted(found)]


def _step(folder: Path) -> int:
    return int(folder.name.rsplit("-", 1)[1])


class ModelMismatchError(PpokitError):
    """A checkpoint holds a model of other sizes than the run resuming it (another model, not a damaged file)."""


# ------------------------------------------------------------------ reading


def read_state(path: Path, state_file: str) -> dict:
    """`path/state_file` as a dict with the keys a resume needs, or a DamagedCheckpointError naming the file."""
    file = path / state_file
    try:
        state = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DamagedCheckpointError(f"{file} cannot be read as JSON ({exc})", path) from None
    missing = [k for k in ("global_step", "args") if not isinstance(state, dict) or k not in state]
    if isinstance(state, dict) and "parts" not in state and "loader" not in state:  # format 2 / format 1
        missing.append("parts")
    if missing:
        raise DamagedCheckpointError(f"{file} lacks {', '.join(missing)}", path)
    return state


@contextlib.contextmanager
def reading(what: Path):
    """Turn any failure while loading `what` (DeepSpeed/torch state) into a DamagedCheckpointError naming it.
    Every torch file in it is first checked to be a whole zip archive (torch's format), to name the bad file."""
    files = sorted(what.rglob("*.pt")) if what.is_dir() else [what]
    for file in files:
        if not zipfile.is_zipfile(file):
            raise DamagedCheckpointError(f"{file} is missing or not a complete torch file (truncated, empty or "
                                         "overwritten)", file)
    try:
        yield
    except DamagedCheckpointError:
        raise
    except Exception as exc:  # torch.load / DeepSpeed raise many kinds on a truncated or garbage file
        raise DamagedCheckpointError(f"{what} cannot be loaded ({type(exc).__name__}: {str(exc)[:200]})",
                                     what) from exc


def readable_on_every_rank(path: Path, state_file: str, rank: int) -> bool:
    """Whether every rank finds `path`'s files whole (state JSON, its RNG state, every torch file of the
    DeepSpeed states): each rank checks, then all agree, so no rank starts loading a checkpoint another
    will give up on (it would wait forever in a collective). A rank's reason is logged."""
    try:
        read_state(path, state_file)
        for file in [path / f"rng_state_{rank}.pt", *sorted(path.glob("*_ds/**/*.pt"))]:
            with reading(file):
                pass
        readable = 1.0
    except DamagedCheckpointError as exc:
        logger.warning("rank %d cannot read %s: %s", rank, path.name, exc.problem)
        readable = 0.0
    return all_reduce_sum(readable)[0] == world_size()


class UnsharedOutputDirError(PpokitError):
    """A rank cannot see the checkpoint folder rank 0 created: output_dir is not on a filesystem all nodes share."""


def every_rank_sees(folder: Path, wait_s: float = 10.0) -> None:
    """A barrier after rank 0 created `folder`, then every rank looks for it and all agree: all ranks write into it
    (ZeRO shards, RNG states), so output_dir must be one filesystem that every node mounts at the same path. When
    some rank cannot see it (after `wait_s`, for a network filesystem's caches), every rank raises the same error
    rather than one failing while the others wait in the next collective."""
    barrier()
    deadline = time.monotonic() + wait_s
    while not folder.is_dir() and time.monotonic() < deadline:
        time.sleep(0.5)
    seen = all_reduce_sum(1.0 if folder.is_dir() else 0.0)[0]
    if seen < world_size():
        blind = "this rank" if not folder.is_dir() else "another rank"
        raise UnsharedOutputDirError(
            f"{int(world_size() - seen)} of {world_size()} ranks ({blind}, rank {rank()} reporting) cannot see "
            f"{folder}, which rank 0 created for a checkpoint: every rank writes its part of a checkpoint there, so "
            "output_dir must be on a filesystem shared by all nodes at the same path (NFS, Lustre, a cloud bucket "
            "mount); set output_dir to such a path, or save_strategy: no to train without checkpoints.")


# ------------------------------------------------------------------ optimizer settings


def optimizer_settings(engine) -> dict | None:
    """The freshly built engine's optimizer settings (from the current arguments), before a checkpoint is loaded."""
    scheduler = getattr(engine, "lr_scheduler", None)
    optimizer = getattr(scheduler, "optimizer", None) or getattr(engine, "optimizer", None)
    if optimizer is None:
        return None
    groups = [{k: group[k] for k in HYPER_KEYS if k in group} for group in optimizer.param_groups]
    base = list(getattr(scheduler, "base_lrs", None) or [g["lr"] for g in optimizer.param_groups])
    return {"groups": groups, "base_lrs": base}


def reapply_optimizer_settings(engine, before: dict | None, name: str, announce: bool = True) -> list[str]:
    """After loading a checkpoint into `engine`, put back the settings of `before` that differ; the LR schedule
    continues from the restored step with the new base value. Returns the changes as 'name key: old -> new'
    (logged when `announce`)."""
    if before is None:
        return []
    scheduler = getattr(engine, "lr_scheduler", None)
    optimizer = getattr(scheduler, "optimizer", None) or engine.optimizer
    changes: list[str] = []
    for group, wanted in zip(optimizer.param_groups, before["groups"], strict=False):
        for key, value in wanted.items():
            if _differs(group.get(key), value):
                changes.append(f"{name} {key}: {group.get(key)} -> {value}")
                group[key] = value
    saved_base = list(getattr(scheduler, "base_lrs", None) or [g["lr"] for g in optimizer.param_groups])
    if any(_differs(old, new) for old, new in zip(saved_base, before["base_lrs"], strict=False)):
        changes.append(f"{name} learning rate: {saved_base[0]:g} -> {before['base_lrs'][0]:g}")
        if scheduler is None:
            for group, lr in zip(optimizer.param_groups, before["base_lrs"], strict=False):
                group["lr"] = lr
        else:
            scheduler.base_lrs = list(before["base_lrs"])
            lrs = [base * rule(scheduler.last_epoch) for base, rule in zip(scheduler.base_lrs, scheduler.lr_lambdas,
                                                                           strict=False)]
            for group, base, lr in zip(optimizer.param_groups, scheduler.base_lrs, lrs, strict=False):
                group["initial_lr"], group["lr"] = base, lr
            scheduler._last_lr = lrs
    if changes and announce:
        logger.warning("resume: the current arguments' optimizer settings replace the checkpoint's (the LR schedule "
                       "continues from the restored step): %s", "; ".join(changes))
    return changes


def _differs(a, b) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return list(a or []) != list(b or [])
    return a != b


# ------------------------------------------------------------------ the run's line


def abandon_newer(output_dir: Path, resumed: Path, newer: list[Path]) -> list[Path]:
    """Move `newer` (checkpoints after `resumed` in output_dir) to output_dir/abandoned/, noting why in NOTE.txt.
    Rank 0 only. Returns where they went."""
    if not newer:
        return []
    target_dir = output_dir / ABANDONED_DIR
    target_dir.mkdir(exist_ok=True)
    moved = []
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    with open(target_dir / ABANDONED_NOTE, "a") as note:
        for path in newer:
            target = target_dir / path.name
            n = 1
            while target.exists():
                n += 1
                target = target_dir / f"{path.name}.{n}"
            shutil.move(str(path), str(target))
            moved.append(target)
            note.write(f"{when}: {path.name} moved here as {target.name}: the run resumed from {resumed.name}, "
                       f"an older checkpoint, so {path.name} is no longer on the run's line. Move it back into "
                       f"{output_dir} by hand to resume it; delete it when it is not needed.\n")
    logger.warning("resumed from %s, an older checkpoint: moved %s to %s (see %s there); 'auto' and export now "
                   "see only this line of the run", resumed.name, ", ".join(p.name for p in newer), target_dir,
                   ABANDONED_NOTE)
    return moved


# ------------------------------------------------------------------ what the checkpoint's models are


def saved_shapes(folder: Path) -> dict[str, list[int]]:
    """{tensor name: shape} of the safetensors files in a HF model folder (headers only, no weights read)."""
    from safetensors import safe_open

    shapes = {}
    for file in sorted(folder.glob("*.safetensors")):
        with contextlib.suppress(Exception), safe_open(str(file), framework="pt") as fh:  # unreadable: load says so
            shapes.update({name: list(fh.get_slice(name).get_shape()) for name in fh.keys()})  # noqa: SIM118
    return shapes


def check_same_sizes(path: Path, name: str, module, model_key: str, saved_args: dict) -> None:
    """Stop with a sentence when `path/name` (the checkpoint's HF copy of a model) has other tensor sizes than
    `module` (the model this run built): a checkpoint of another model, not a damaged one."""
    if hasattr(module, "peft_config") or not (path / name).is_dir():
        return  # LoRA names differ from the merged copy's; a missing folder is reported where it is read
    saved = saved_shapes(path / name)
    ours = {key: list(getattr(p, "ds_shape", None) or p.shape) for key, p in module.named_parameters()}
    differ = [key for key in ours if key in saved and saved[key] != ours[key]]
    if not differ:
        return
    key = differ[0]
    raise ModelMismatchError(
        f"{path.name} holds a model of other sizes than this run's {name}: {key} is {saved[key]} in the checkpoint "
        f"but {ours[key]} here ({len(differ)} of {len(ours)} tensors differ). The checkpoint was made from "
        f"{model_key} {saved_args.get(model_key)!r}; resume it with that model, or start this one from step 0 in "
        "another output_dir")


def missing_optimizer_state(path: Path, name: str, saved_args: dict, force: bool) -> None:
    """`path` has no `<name>_ds/` (DeepSpeed's weights, optimizer and LR schedule). Written without it on purpose
    (ignore_save_lr_and_optim): a note. Otherwise it was deleted or not copied: say what is missing; continuing
    from the HF copy (Adam's moments restarted) needs force_resume, as it no longer repeats the run exactly."""
    if saved_args.get("ignore_save_lr_and_optim"):
        logger.info("%s was saved with ignore_save_lr_and_optim (no optimizer state): the weights come from "
                    "%s/, Adam's moments start from zero", path, name)
        return
    message = (f"{path} has no {name}_ds/ folder (DeepSpeed's weights, optimizer and LR-schedule state), although "
               f"the run that wrote it saved one (ignore_save_lr_and_optim was not set): it was deleted or not "
               f"copied with the checkpoint")
    if not force:
        raise DamagedCheckpointError(
            message, path, remedy=f"copy it back, or pass --force_resume true to continue from {name}/'s weights with "
            "Adam's moments restarted (the steps after it then differ from the uninterrupted run)")
    logger.warning("force_resume: %s; continuing from %s/'s weights with Adam's moments restarted", message, name)

