"""Checkpoint folders on disk: the layout, finding complete ones, publishing atomically, pruning.

Layout: `output_dir/checkpoint-<step>/` holding
  actor/              plain HF model folder (safetensors, LoRA merged) + tokenizer: loadable on its own
  actor_ds/           DeepSpeed checkpoint (module, optimizer, LR scheduler; ZeRO shards when sharded);
                      left out with `ignore_save_lr_and_optim`
  actor_adapter/      the LoRA adapters (peft), only with `ignore_save_lr_and_optim` and `lora_rank` > 0
  critic/ critic_ds/  the same for the critic (PPO)
  rng_state_<rank>.pt python/numpy/torch RNG states of each rank
  state_<name>_<rank>.pt  per-rank state of a registered part (`ppokit.checkpoint.register`), if any
  manifest.json       what the folder holds: each stateful part and where, each model folder with its size
  trainer_state.json  the step, arguments and every JSON part's state (`ppokit.checkpoint.state`) — written LAST
A checkpoint is written into `.tmp-checkpoint-<step>`, flushed to disk and renamed when complete, so a
crash or SIGKILL mid-save never leaves a `checkpoint-<step>` that looks complete (one without
trainer_state.json is ignored); older ones are pruned only after the rename.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from ppokit.checkpoint.guard import (  # noqa: F401 - STATE_FILE and complete_checkpoints are files' names too
    STATE_FILE,
    DamagedCheckpointError,
    checkpoint_folder,
    complete_checkpoints,
    damaged_advice,
    read_state,
)
from ppokit.engine import rank
from ppokit.errors import PpokitError

logger = logging.getLogger("ppokit")

TMP_PREFIX = ".tmp-checkpoint-"
OLD_PREFIX = ".old-checkpoint-"


class CheckpointError(PpokitError):
    """A checkpoint cannot be written or used (missing, incomplete, or made with different arguments)."""


# ------------------------------------------------------------------ processes and files


def is_rank0() -> bool:
    return rank() == 0


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (new files, renames) durable."""
    with contextlib.suppress(OSError):  # some filesystems cannot open folders; the data is still flushed
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_tree(path: Path) -> None:
    """Flush every file and folder under `path` to disk so a rename after it publishes complete data."""
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())
        fsync_dir(Path(root))


# ------------------------------------------------------------------ finding checkpoints


def is_auto(spec) -> bool:
    return spec is True or str(spec).lower() in ("true", "auto", "1", "yes", "latest")


def find_checkpoint(spec, output_dir: str | Path) -> Path:
    """`resume_from_checkpoint` → a checkpoint folder: a path (or a name inside output_dir), or true/"auto"
    for the newest complete one in output_dir. A folder holding checkpoints gives its newest complete one."""
    if is_auto(spec):
        found = complete_checkpoints(output_dir)
        if not found:
            raise CheckpointError(f"resume_from_checkpoint: there is no complete checkpoint-<step> folder in {output_dir}; "
                                  "train without resume_from_checkpoint, or point it at a checkpoint folder")
        for path in reversed(found[1:]):  # the newest whose trainer_state.json reads; the oldest is tried on load
            try:
                read_state(path, STATE_FILE)
                return path
            except DamagedCheckpointError as exc:
                logger.warning("resume_from_checkpoint=auto skips %s: %s", path.name, exc.problem)
        return found[0]
    path = Path(str(spec))
    if not path.is_dir() and (Path(output_dir) / path).is_dir():
        path = Path(output_dir) / path
    if not path.is_dir():
        raise CheckpointError(f"resume_from_checkpoint: {path} is not a folder; give a checkpoint-<step> folder or 'auto'")
    if not (path / STATE_FILE).is_file():
        found = complete_checkpoints(path)
        if found:
            return found[-1]
        raise CheckpointError(f"{path} is not a complete checkpoint (it has no {STATE_FILE}): it may be from an "
                              f"interrupted save; {damaged_advice(checkpoint_folder(path))}")
    return path



def last_checkpoint_name(root: Path) -> str | None:
    found = complete_checkpoints(root)
    return str(found[-1]) if found else None


def size_note(path: Path, args, short: bool = False) -> str:
    """What makes a checkpoint big, e.g. "2.1 GB: actor 0.5 GB (HF weights), actor_ds 1.6 GB (weights + Adam)";
    `short`: only the size (every save after the first)."""
    def gb(p: Path) -> float:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 1e9 if p.exists() else 0.0

    if short:
        return f"{gb(path):.2g} GB"
    what = {"actor": "HF weights", "actor_ds": "DeepSpeed weights + optimizer state", "critic": "HF weights",
            "critic_ds": "DeepSpeed weights + optimizer state"}
    parts = [f"{name} {gb(path / name):.2g} GB ({kind})" for name, kind in what.items() if (path / name).exists()]
    keep = f"save_total_limit={args.save_total_limit} keeps the newest" if args.save_total_limit else \
        "all are kept (save_total_limit)"
    return f"{gb(path):.2g} GB: " + ", ".join(parts) + f"; {keep}; ignore_save_lr_and_optim drops the optimizer state"


def publish(tmp: Path, final: Path) -> None:
    """Rename the finished `tmp` to `final` (an older `final` is moved aside first, then deleted)."""
    old = final.with_name(OLD_PREFIX + final.name.split("-", 1)[1])
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def prune(root: Path, limit: int | None, keep: Path | None = None) -> None:
    """Keep the newest `limit` complete checkpoints (always `keep`, the one just written); delete the others
    and what interrupted saves left behind. Runs only after the new checkpoint is complete."""
    for leftover in list(root.glob(TMP_PREFIX + "*")) + list(root.glob(OLD_PREFIX + "*")):
        shutil.rmtree(leftover, ignore_errors=True)
    if not limit or limit <= 0:
        return
    others = [p for p in complete_checkpoints(root) if keep is None or p.resolve() != keep.resolve()]
    excess = len(others) + (keep is not None) - limit
    for old in others[: max(excess, 0)]:
        shutil.rmtree(old, ignore_errors=True)
