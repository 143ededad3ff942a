"""Checkpoints that survive crashes, exact resume, and the checks before training starts.

Layout: `output_dir/checkpoint-<step>/` holding
  actor/              plain HF model folder (safetensors, LoRA merged) + tokenizer: loadable on its own
  actor_ds/           DeepSpeed checkpoint (module, optimizer, LR scheduler; ZeRO shards when sharded);
                      left out with `ignore_save_lr_and_optim`
  actor_adapter/      the LoRA adapters (peft), only with `ignore_save_lr_and_optim` and `lora_rank` > 0
  critic/ critic_ds/  the same for the critic (PPO)
  rng_state_<rank>.pt python/numpy/torch RNG states of each rank
  trainer_state.json  step, counters, loader/KL/normaliser state, metric history, arguments — written LAST
A checkpoint is written into `.tmp-checkpoint-<step>`, flushed to disk and renamed when complete, so a
crash or SIGKILL mid-save never leaves a `checkpoint-<step>` that looks complete (one without
trainer_state.json is ignored); older ones are pruned only after the rename.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from ppokit.checkpoint_guard import (
    DamagedCheckpointError,
    abandon_newer,
    every_rank_sees,
    optimizer_settings,
    read_state,
    readable_on_every_rank,
    reading,
    reapply_optimizer_settings,
)
from ppokit.checkpoint_lock import check_not_model_folder
from ppokit.checkpoint_safety import check_finite, data_fingerprint, disk_full, is_disk_full, note_plan_change
from ppokit.engine import barrier, rank, world_size
from ppokit.errors import PpokitError
from ppokit.models.folders import WeightsError, load_weights, save_adapter, save_hf
from ppokit.training.pipeline import load_queue, save_queue

logger = logging.getLogger("ppokit")

STATE_FILE = "trainer_state.json"
TMP_PREFIX = ".tmp-checkpoint-"
OLD_PREFIX = ".old-checkpoint-"
FORMAT_VERSION = 1
# Keys whose change alters what a run means; resuming across them needs --force_resume.
MEANING_KEYS = (
    "actor_model_name_or_path", "critic_model_name_or_path", "reward_model_name_or_path", "rl_algorithm",
    "train_datasets", "train_task_config", "train_data_size", "prompt_key", "response_key", "global_batch_size",
    "global_mini_batch_size", "per_device_prompt_batch_size", "per_device_train_batch_size",
    "gradient_accumulation_steps", "rollout_n", "update_iters", "seed", "lora_rank", "lora_alpha", "policy_loss",
    "loss_agg_mode", "max_prompt_len", "max_dec_len", "max_length", "use_rm_server", "use_rule_reward",
    "reward_functions", "task", "dataloader_shuffle", "dataloader_drop_last", "dynamic_sampling", "ptx_datasets",
)
# Keys that may change freely between a run and its resume (no note).
HARMLESS_KEYS = ("max_steps", "num_train_epochs", "resume_from_checkpoint", "force_resume", "output_dir",
                 "logging_dir", "run_name", "report_to", "disable_tqdm", "do_eval", "do_train",
                 "evaluation_strategy", "overwrite_output_dir", "decay_steps")
HARMLESS_PREFIXES = ("logging_", "eval_", "save_")


class CheckpointError(PpokitError):
    """A checkpoint cannot be written or used (missing, incomplete, or made with different arguments)."""


# ------------------------------------------------------------------ processes, files and RNG


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


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ------------------------------------------------------------------ finding checkpoints


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
                logger.warning("resume_from_checkpoint=auto skips %s: %s", path.name, exc)
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
                              "interrupted save; resume from an older checkpoint-<step> or with 'auto'")
    return path


# ------------------------------------------------------------------ weights without DeepSpeed


def refresh_master_weights(engine) -> None:
    """After writing module weights directly, copy them into ZeRO's fp32 master partitions (if any)."""
    optimizer = getattr(engine, "optimizer", None)
    if hasattr(optimizer, "refresh_fp32_params"):
        optimizer.refresh_fp32_params()



# ------------------------------------------------------------------ saving


def trainer_state(session) -> dict:
    st = session.state
    return {
        "format": FORMAT_VERSION,
        "global_step": session.global_step,
        "world_size": st.dist.world_size,
        "rollouts_drawn": st.rollouts_drawn,
        "updates_done": st.updates_done,
        "skipped_groups": st.skipped_groups,
        "loader": st.loader.state_dict(),
        "kl_ctl": st.kl_ctl.state_dict(),
        "reward_normalizer": st.reward_normalizer.state_dict() if st.reward_normalizer is not None else None,
        "ptx_loader": st.ptx_loss.loader.state_dict() if st.ptx_loss is not None else None,
        "schedules": {"actor": schedule_position(st.policy.engine),
                      "critic": schedule_position(st.critic.engine) if st.critic is not None else None},
        "history": session.history,
        "data_fingerprint": fingerprint_of(st),
        "run_plan": st.run.to_dict(),  # the run's length and schedules when saved (a resume says if they changed)
        "args": session.args.to_dict(),
        "config": session.args.to_config(),  # only the keys that were set: rebuilds the same batch mode
    }


def fingerprint_of(state) -> str:
    """The training records' content hash, computed once per run (the records do not change during it)."""
    cached = getattr(state, "_data_fingerprint", None)
    if cached is None or cached[0] is not state.train_records:
        cached = (state.train_records, data_fingerprint(state.train_records))
        state._data_fingerprint = cached
    return cached[1]


def schedule_position(engine) -> dict:
    """How far the engine's optimizer and LR schedule have gone (restored when optimizer state is not saved)."""
    scheduler = getattr(engine, "lr_scheduler", None)
    return {"global_steps": int(engine.global_steps),
            "lr_last_epoch": int(scheduler.last_epoch) if scheduler is not None else None}


def fast_forward_schedule(engine, position: dict | None) -> None:
    """Put a fresh engine's step counter and LR schedule where the saved run was (its Adam moments restart)."""
    if not position:
        return
    engine.global_steps = position["global_steps"]
    scheduler = getattr(engine, "lr_scheduler", None)
    if scheduler is not None and position.get("lr_last_epoch") is not None:
        scheduler._step_count = max(scheduler._step_count, 2)  # past torch's "step before optimizer" check
        scheduler.last_epoch = position["lr_last_epoch"] - 1
        scheduler.step()  # sets every group's lr for step `lr_last_epoch`


def write_actor(session, tmp: Path) -> None:
    """actor/ (always), actor_ds/ (optimizer state) or actor_adapter/ (LoRA without optimizer state). All ranks."""
    st, args = session.state, session.args
    engine = st.policy.engine
    if not args.ignore_save_lr_and_optim:
        engine.save_checkpoint(str(tmp / "actor_ds"), tag="state")  # collective: every rank writes its shards
    elif hasattr(engine.module, "peft_config"):
        save_adapter(engine.module, tmp / "actor_adapter")
    save_hf(engine.module, st.policy.tokenizer, tmp / "actor")


def trained_modules(session) -> dict:
    """{name: module} of the models a checkpoint saves (actor, and critic for PPO)."""
    st = session.state
    return {"actor": st.policy.engine.module, "critic": st.critic.engine.module if st.critic is not None else None}


def last_checkpoint_name(root: Path) -> str | None:
    found = complete_checkpoints(root)
    return str(found[-1]) if found else None


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
    rng = rng_state()
    try:
        write_checkpoint(session, tmp, final, rng)
    except Exception as exc:
        if is_disk_full(exc, root, checkpoint_bytes(session)):
            raise disk_full(final.name, root, checkpoint_bytes(session), tmp) from None
        raise
    set_rng_state(rng)
    logger.info("saved %s (%s)", final, size_note(final, args))
    return final


def write_checkpoint(session, tmp: Path, final: Path, rng: dict) -> None:
    """`save_checkpoint`'s writing: everything into `tmp`, trainer_state.json last, then the rename to `final`."""
    args, st = session.args, session.state
    if is_rank0():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    every_rank_sees(tmp)  # a barrier; then every rank writes into rank 0's folder: output_dir must be shared
    write_actor(session, tmp)
    if st.critic is not None:
        st.critic.save(tmp, bool(args.ignore_save_lr_and_optim))
    torch.save(rng, tmp / f"rng_state_{rank()}.pt")
    save_queue(getattr(session, "pipeline", None), tmp, rank())  # asynchronous runs: the batches not yet consumed
    barrier()
    if is_rank0():
        (tmp / STATE_FILE).write_text(json.dumps(trainer_state(session), indent=1, default=str))
        fsync_tree(tmp)
        publish(tmp, final)
        prune(final.parent, args.save_total_limit, keep=final)
    barrier()


def size_note(path: Path, args) -> str:
    """What makes a checkpoint big, e.g. "2.1 GB: actor 0.5 GB (HF weights), actor_ds 1.6 GB (weights + Adam)"."""
    def gb(p: Path) -> float:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) / 1e9 if p.exists() else 0.0

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


# ------------------------------------------------------------------ resuming


def is_harmless(key: str) -> bool:
    return key in HARMLESS_KEYS or key.startswith(HARMLESS_PREFIXES)


def changed_meaning_keys(saved: dict, current: dict) -> list[str]:
    """Keys that differ between the checkpoint's arguments and now and change the run's meaning."""
    return [k for k in MEANING_KEYS if k in saved and k in current and saved[k] != current[k]]


def check_arguments(path: Path, saved: dict, args) -> None:
    """Stop when arguments that change the run's meaning differ from the checkpoint's (unless force_resume);
    note the other differences."""
    current = args.to_dict()
    changed = changed_meaning_keys(saved, current)
    listing = "; ".join(f"{k}: {saved[k]!r} -> {current[k]!r}" for k in changed)
    if changed and not args.force_resume:
        raise CheckpointError(
            f"{path} was made with different arguments that change what the run means ({listing}); "
            "restore them, or pass --force_resume true to resume anyway"
        )
    if changed and is_rank0():
        logger.warning("force_resume: resuming %s although these arguments changed: %s", path, listing)
    others = [k for k in current if k in saved and saved[k] != current[k] and k not in changed and not is_harmless(k)]
    if others and is_rank0():  # optimizer keys among them are applied by load_actor (reapply_optimizer_settings)
        logger.warning("resuming %s with changed arguments (they apply from the next step): %s", path,
                       "; ".join(f"{k}: {saved[k]!r} -> {current[k]!r}" for k in others))


def check_same_data(path: Path, saved: dict, session) -> None:
    """Stop when the training records' content differs from the checkpoint's (unless force_resume)."""
    recorded = saved.get("data_fingerprint")
    if recorded is None or recorded == fingerprint_of(session.state):
        return
    what = f"{session.args.train_datasets or session.args.train_task_config}"
    if not session.args.force_resume:
        raise CheckpointError(
            f"{path} was trained on other data: the content of the training data ({what}) differs from the "
            "checkpoint's (same number of records, different text or labels); restore the original files, or "
            "pass --force_resume true to continue on the new data")
    if is_rank0():
        logger.warning("force_resume: resuming %s although the training data's content changed (%s)", path, what)


def load_actor(session, path: Path, saved: dict) -> None:
    st = session.state
    schedules = saved.get("schedules") or {}
    engine = st.policy.engine
    if (path / "actor_ds").is_dir():
        wanted = optimizer_settings(engine)  # what the current arguments built; the checkpoint's replace them
        with reading(path / "actor_ds"):
            load, _ = engine.load_checkpoint(str(path / "actor_ds"), tag="state", load_optimizer_states=True,
                                             load_lr_scheduler_states=True)
        if load is None:
            raise DamagedCheckpointError(f"DeepSpeed found no state in {path / 'actor_ds'}; the checkpoint is damaged")
        reapply_optimizer_settings(engine, wanted, "actor", announce=is_rank0())
    else:
        adapter = path / "actor_adapter"
        try:
            load_weights(engine.module, adapter if hasattr(engine.module, "peft_config") else path / "actor")
        except WeightsError as exc:
            raise CheckpointError(str(exc)) from exc
        refresh_master_weights(engine)
        fast_forward_schedule(engine, schedules.get("actor"))
        logger.info("%s has no optimizer state (ignore_save_lr_and_optim): Adam's moments start from zero", path)
    if st.critic is not None:
        wanted = optimizer_settings(st.critic.engine)
        with reading(path / ("critic_ds" if (path / "critic_ds").is_dir() else "critic")):
            st.critic.load(path)
        reapply_optimizer_settings(st.critic.engine, wanted, "critic", announce=is_rank0())
        if not (path / "critic_ds").is_dir():
            refresh_master_weights(st.critic.engine)
            fast_forward_schedule(st.critic.engine, schedules.get("critic"))
    st.rollout_engine.update_weights(engine.module)


def restore_counters(session, saved: dict) -> None:
    st = session.state
    session.global_step = saved["global_step"]
    st.rollouts_drawn, st.updates_done = saved["rollouts_drawn"], saved["updates_done"]
    st.skipped_groups = saved["skipped_groups"]
    st.loader.load_state_dict(saved["loader"])
    st.kl_ctl.load_state_dict(saved["kl_ctl"])
    if st.reward_normalizer is not None and saved.get("reward_normalizer"):
        st.reward_normalizer.load_state_dict(saved["reward_normalizer"])
    if st.ptx_loss is not None and saved.get("ptx_loader"):
        st.ptx_loss.loader.load_state_dict(saved["ptx_loader"])
    session.history = [h for h in saved.get("history", []) if h["step"] <= session.global_step]


def resume_into(session, spec) -> Path:
    """Load a checkpoint into a freshly built Session so the next step is the one the run would have taken.

    All ranks call it. Rows after the checkpoint's step are dropped from metrics.jsonl and samples.jsonl.
    With `auto`, a damaged checkpoint is skipped (with a warning) for the next older one.
    """
    path = find_checkpoint(spec, session.args.output_dir)
    if not is_auto(spec):
        return resume_from(session, path)
    older = [p for p in complete_checkpoints(session.args.output_dir) if p.name != path.name
             and int(p.name.split("-")[1]) < int(path.name.split("-")[1])]
    candidates = [path, *reversed(older)]
    for candidate in candidates[:-1]:
        try:
            if readable_on_every_rank(candidate, STATE_FILE, rank()):  # the ranks agree before any loads
                return resume_from(session, candidate)
            logger.warning("resume_from_checkpoint=auto skips %s: a rank cannot read it", candidate.name)
        except DamagedCheckpointError as exc:
            logger.warning("resume_from_checkpoint=auto skips %s: %s", candidate.name, exc)
    return resume_from(session, candidates[-1])


def resume_from(session, path: Path) -> Path:
    """`resume_into` for one checkpoint folder."""
    saved = read_state(path, STATE_FILE)
    if saved.get("format", 1) > FORMAT_VERSION:
        raise CheckpointError(f"{path} was written by a newer ppokit (checkpoint format {saved['format']}); "
                              "upgrade ppokit to resume it")
    check_arguments(path, saved["args"], session.args)
    check_same_data(path, saved, session)
    note_plan_change(path, saved.get("run_plan"), session.state.run)
    world = world_size()
    if saved.get("world_size", world) != world:
        raise CheckpointError(f"{path} was saved by {saved['world_size']} processes but this run has {world}; "
                              "resume with the same number of processes")
    rng_file = path / f"rng_state_{rank()}.pt"
    with reading(rng_file):
        rng = torch.load(rng_file, weights_only=False)
    load_actor(session, path, saved)
    restore_counters(session, saved)
    load_queue(getattr(session, "pipeline", None), path, rank())
    newer = [p for p in complete_checkpoints(path.parent) if p.name != path.name
             and int(p.name.split("-")[1]) > session.global_step]
    barrier()  # every rank has loaded before rank 0 moves anything
    if newer and is_rank0() and path.parent.resolve() == Path(session.args.output_dir).resolve():
        abandon_newer(path.parent, path, newer)
    session.resume_step = session.global_step
    if session._tracker is not None:
        session._tracker.truncate_after(session.global_step)
    session.tracker  # noqa: B018 - opened now (continuing the run's files), before the RNG is restored
    set_rng_state(rng)
    logger.info("resumed from %s at step %d", path, session.global_step)
    return path


# ------------------------------------------------------------------ before training


def checkpoint_bytes(session) -> int:
    """About the disk one checkpoint takes: the HF copy, DeepSpeed's module and two Adam moments of the
    trainable weights (actor and critic); with save_strategy "no", just the final HF model."""
    args, st = session.args, session.state
    engines = [st.policy.engine] + ([st.critic.engine] if st.critic is not None else [])
    total = 0
    for engine in engines:
        params = [(int(getattr(p, "ds_numel", 0) or p.numel()), p) for p in engine.module.parameters()]  # ZeRO-3 too
        weights = sum(n * p.element_size() for n, p in params)
        trainable = sum(n * 4 for n, p in params if p.requires_grad)
        if args.save_strategy == "no":
            total += weights
        elif args.ignore_save_lr_and_optim:
            total += weights + trainable
        else:
            total += 2 * weights + 2 * trainable
    return total
