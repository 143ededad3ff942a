"""What is checked before anything is published: finite weights, room on the disk, and (on resume) the same data.

- `check_finite`: a model whose weights hold NaN/inf is never written as a checkpoint, a final model or an
  export; the run stops with `NonFiniteWeightsError` (exit 2) naming the step and the last finite checkpoint.
- `disk_full`: an ENOSPC while writing becomes one sentence (how much was needed, how much is free, where),
  after the caller's cleanup removed the partial folder.
- `data_fingerprint`: a content hash of the training records, recorded in the checkpoint and compared on resume,
  so a data file of the same size but other content is noticed (a changed row count was already caught).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import shutil
from pathlib import Path

import torch

from ppokit.engine import all_reduce_sum
from ppokit.errors import PpokitError

logger = logging.getLogger("ppokit")


class NonFiniteWeightsError(PpokitError):
    """The model's weights hold NaN or inf: nothing is saved and the run stops."""


class DiskFullError(PpokitError):
    """The disk filled up while ppokit was writing; the partial output was removed."""


# ------------------------------------------------------------------ finite weights


def _local_tensor(param: torch.Tensor) -> torch.Tensor:
    """The part of `param` this rank holds (its ZeRO-3 partition, else the whole tensor)."""
    return getattr(param, "ds_tensor", None) if hasattr(param, "ds_id") else param


def nonfinite_names(module) -> list[str]:
    """Names of the parameters of `module` whose local values hold NaN or inf (this rank's view)."""
    bad = []
    for name, param in module.named_parameters():
        tensor = _local_tensor(param)
        if tensor is not None and tensor.numel() and not bool(torch.isfinite(tensor.detach()).all()):
            bad.append(name)
    return bad


def check_finite(modules: dict, step: int, what: str, last_good: str | None) -> None:
    """Raise NonFiniteWeightsError when any of `modules` ({name: module}) holds NaN/inf on any rank.
    Collective with several processes (every rank calls it, so all stop together)."""
    found = {name: nonfinite_names(module) for name, module in modules.items() if module is not None}
    count = sum(len(v) for v in found.values())
    if all_reduce_sum(float(count))[0] == 0:
        return
    listed = "; ".join(f"{name}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''} ({len(names)} tensors)"
                       for name, names in found.items() if names) or "on another rank"
    raise NonFiniteWeightsError(
        f"the weights hold NaN or inf after step {step} ({listed}); {what} was not written and the run stops: "
        f"{after_divergence(last_good)}")


def after_divergence(last_good: str | None) -> str:
    """What to do after the weights or the loss went non-finite."""
    fix = "lower learning_rate (or check the rewards and max_grad_norm)"
    if last_good:
        return f"the last finite checkpoint is {last_good}; {fix} and resume from it"
    return f"no checkpoint was saved before it; {fix} and start again"


# ------------------------------------------------------------------ disk full


# torch's zip writer (inline_container.cc) reports a short write without an errno: "file write failed", or
# "unexpected pos N vs M" when the disk filled up between two records (DeepSpeed's checkpoint files are torch's).
ZIP_WRITER_FAILURES = ("file write failed", "unexpected pos", "inline_container.cc")


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB', 3.2e9 -> '2.98 GiB': a size that is never shown as 0.00 of a too-large unit."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def is_disk_full(exc: BaseException, where: Path | None = None, need_bytes: int | None = None) -> bool:
    """True when `exc` (or an exception it was raised from, as torch and safetensors chain them) is ENOSPC/EDQUOT,
    or is a failure of torch's zip writer (no errno) while `where` has less than `need_bytes` free."""
    seen, bare_write_failure = 0, False
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc):
            return True
        bare_write_failure |= any(words in str(exc) for words in ZIP_WRITER_FAILURES)
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    if bare_write_failure and where is not None and need_bytes:
        with contextlib.suppress(OSError):
            return shutil.disk_usage(where).free < need_bytes
    return False


def _folder_bytes(path: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return 0


RESUME_ADVICE = "Free space or choose another output_dir, then resume with --resume_from_checkpoint auto"


def disk_full(what: str, where: Path, need_bytes: int | None, partial: Path | None,
              advice: str = RESUME_ADVICE) -> DiskFullError:
    """The sentence for an ENOSPC while writing `what` into `where` (after removing `partial`)."""
    written = _folder_bytes(partial) if partial is not None and partial.exists() else 0
    if partial is not None:
        shutil.rmtree(partial, ignore_errors=True)
    free_text = "an unknown amount"
    with contextlib.suppress(OSError):
        free_text = human_bytes(shutil.disk_usage(where if where.exists() else where.parent).free)
    need = f"about {human_bytes(need_bytes)}" if need_bytes else f"more than the {human_bytes(written)} written"
    return DiskFullError(
        f"the disk is full: writing {what} in {where} needs {need} and {free_text} is free there; the partial "
        f"folder was removed and nothing was published. {advice}")


# ------------------------------------------------------------------ data identity


def data_fingerprint(records: list[dict]) -> str:
    """sha256 of the training records' content (prompt text, labels, fields; token ids left out)."""
    digest = hashlib.sha256()
    for record in records:
        kept = {k: v for k, v in record.items() if not k.startswith("_") or k == "_prompt_text"}
        digest.update(json.dumps(kept, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8", "replace"))
        digest.update(b"\n")
    return digest.hexdigest()


def note_plan_change(path: Path, saved_plan: dict | None, run) -> None:
    """Say when a resume changes the run's length or LR schedule (e.g. a larger max_steps): the schedules
    continue from the checkpoint's position along the new plan's curve."""
    if not saved_plan or saved_plan.get("summary") == run.describe():
        return
    if saved_plan.get("rollout_steps") == run.rollout_steps and saved_plan.get("actor_lr_schedule") == \
            run.to_dict()["actor_lr_schedule"]:
        return
    logger.warning("resuming %s with a different run plan: it was '%s', now '%s'; the LR schedules continue from "
                   "the checkpoint's step along the new plan", path.name, saved_plan.get("summary"), run.describe())
