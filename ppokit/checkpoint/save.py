"""Writing a checkpoint: every stateful part through the state protocol, the models through DeepSpeed, all into a
temporary folder that is renamed when complete (see `ppokit.checkpoint.files` for the layout)."""

from __future__ import annotations

import json
import logging
import shutil
import weakref
from pathlib import Path

import torch

from ppokit.checkpoint.files import (
    STATE_FILE,
    TMP_PREFIX,
    fsync_tree,
    is_rank0,
    last_checkpoint_name,
    prune,
    publish,
    size_note,
)
from ppokit.checkpoint.guard import every_rank_sees
from ppokit.checkpoint.lock import check_not_model_folder
from ppokit.checkpoint.safety import check_finite, data_fingerprint, disk_full, is_disk_full
from ppokit.checkpoint.state import MANIFEST_FILE, manifest, parts_of, rng_state, set_rng_state
from ppokit.engine import barrier, rank
from ppokit.models.folders import save_adapter, save_hf

logger = logging.getLogger("ppokit")

_EXPLAINED: weakref.WeakSet = weakref.WeakSet()  # sessions that were told what their checkpoint holds
FORMAT_VERSION = 3  # 1: flat keys (before the state protocol); 2: before the producer/learner split; both read


def trainer_state(session, parts=None) -> dict:
    """trainer_state.json: the header a resume reads first (step, processes, arguments, model schedules, data
    fingerprint) and every JSON part's state under "parts"."""
    st = session.learner
    parts = parts_of(session) if parts is None else parts
    return {
        "format": FORMAT_VERSION,
        "global_step": session.global_step,
        "world_size": st.dist.world_size,
        "schedules": {"actor": schedule_position(st.policy.engine),
                      "critic": schedule_position(st.critic.engine) if st.critic is not None else None},
        "data_fingerprint": fingerprint_of(session.producer),
        "parts": {p.name: p.obj.state_dict() for p in parts if not p.per_rank},
        "args": session.args.to_dict(),
        "config": session.args.to_config(),  # only the keys that were set: rebuilds the same batch mode
    }


_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # producer -> (records, hash)


def fingerprint_of(producer) -> str:
    """The training records' content hash, computed once per run (the records do not change during it)."""
    cached = _FINGERPRINTS.get(producer)
    if cached is None or cached[0] is not producer.train_records:
        cached = (producer.train_records, data_fingerprint(producer.train_records))
        _FINGERPRINTS[producer] = cached
    return cached[1]


def schedule_position(engine) -> dict:
    """How far the engine's optimizer and LR schedule have gone (restored when optimizer state is not saved)."""
    scheduler = getattr(engine, "lr_scheduler", None)
    return {"global_steps": int(engine.global_steps),
            "lr_last_epoch": int(scheduler.last_epoch) if scheduler is not None else None}


def write_actor(session, tmp: Path) -> None:
    """actor/ (always), actor_ds/ (optimizer state) or actor_adapter/ (LoRA without optimizer state). All ranks."""
    st, args = session.learner, session.args
    engine = st.policy.engine
    if not args.ignore_save_lr_and_optim:
        engine.save_checkpoint(str(tmp / "actor_ds"), tag="state")  # collective: every rank writes its shards
    elif hasattr(engine.module, "peft_config"):
        save_adapter(engine.module, tmp / "actor_adapter")
    save_hf(engine.module, st.policy.tokenizer, tmp / "actor")


def trained_modules(session) -> dict:
    """{name: module} of the models a checkpoint saves (actor, and critic for PPO)."""
    st = session.learner
    return {"actor": st.policy.engine.module, "critic": st.critic.engine.module if st.critic is not None else None}


def save_checkpoint(session) -> Path:
    """Write `checkpoint-<step>` atomically and prune to `save_total_limit`; returns its path. All ranks call it.

    Non-finite weights are refused before anything is written (NonFiniteWeightsError); a full disk removes the
    partial folder and is one sentence (DiskFullError). Saving leaves every RNG as it was, so a run that saves
    and one that does not take the same steps.
    """
    args = session.args
    root = Path(args.output_dir)
    final = root / f"checkpoint-{session.global_step}"
    tmp = root / f"{TMP_PREFIX}{session.global_step}"
    check_not_model_folder(args)
    check_finite(trained_modules(session), session.global_step, final.name, last_checkpoint_name(root))
    rng = rng_state()  # taken before anything below draws, restored after: saving leaves every RNG as it was
    try:
        write_checkpoint(session, tmp, final, rng)
    except Exception as exc:
        if is_disk_full(exc, root, checkpoint_bytes(session)):
            raise disk_full(final.name, root, checkpoint_bytes(session), tmp) from None
        if is_rank0():  # a save that failed leaves no partial folder behind, whatever the reason
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    set_rng_state(rng)
    if session in _EXPLAINED:
        logger.info("saved %s (%s)", final, size_note(final, args, short=True))
    else:  # what makes a checkpoint big and how to shrink it: said at the first save only
        _EXPLAINED.add(session)
        logger.info("saved %s (%s)", final, size_note(final, args))
    return final


def write_checkpoint(session, tmp: Path, final: Path, rng: dict) -> None:
    """`save_checkpoint`'s writing: everything into `tmp`, trainer_state.json last, then the rename to `final`."""
    args, st = session.args, session.learner
    if is_rank0():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    every_rank_sees(tmp)  # a barrier; then every rank writes into rank 0's folder: output_dir must be shared
    write_actor(session, tmp)
    if st.critic is not None:
        st.critic.save(tmp, bool(args.ignore_save_lr_and_optim))
    parts = parts_of(session)
    for part in parts:
        if part.per_rank:  # the rng part saves the state taken before the save began
            torch.save(rng if part.name == "rng" else part.obj.state_dict(), tmp / part.where(rank()))
    barrier()
    if is_rank0():
        state = trainer_state(session, parts)
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest(tmp, parts, st.dist.world_size), indent=1))
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=1, default=str))
        fsync_tree(tmp)
        publish(tmp, final)
        prune(final.parent, args.save_total_limit, keep=final)
    barrier()


def checkpoint_bytes(session) -> int:
    """About the disk one checkpoint takes (actor and critic): the HF copy of the weights; unless
    ignore_save_lr_and_optim, DeepSpeed's copy of the module, Adam's two fp32 moments of the trainable weights and,
    when the weights are 16-bit, their fp32 master copy; with save_strategy "no", just the final HF model."""
    args, st = session.args, session.learner
    engines = [st.policy.engine] + ([st.critic.engine] if st.critic is not None else [])
    total = 0
    for engine in engines:
        params = [(int(getattr(p, "ds_numel", 0) or p.numel()), p) for p in engine.module.parameters()]  # ZeRO-3 too
        weights = sum(n * p.element_size() for n, p in params)
        optimizer = sum(n * (8 if p.element_size() >= 4 else 12) for n, p in params if p.requires_grad)
        if args.save_strategy == "no" or args.ignore_save_lr_and_optim:
            total += weights
        else:
            total += 2 * weights + optimizer
    return total
