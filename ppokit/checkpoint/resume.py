"""Resuming: a checkpoint's arguments and data are checked, the models loaded through DeepSpeed, then every stateful
part loads its own state (`ppokit.checkpoint.state`), the RNGs last, so the next step is the one the run would
have taken."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ppokit.checkpoint.claim import claim_output_dir
from ppokit.checkpoint.files import (
    STATE_FILE,
    CheckpointError,
    complete_checkpoints,
    find_checkpoint,
    is_auto,
    is_rank0,
)
from ppokit.checkpoint.guard import (
    DamagedCheckpointError,
    abandon_newer,
    check_same_sizes,
    missing_optimizer_state,
    optimizer_settings,
    read_state,
    readable_on_every_rank,
    reading,
    reapply_optimizer_settings,
)
from ppokit.checkpoint.save import FORMAT_VERSION, fingerprint_of
from ppokit.checkpoint.state import legacy_parts, parts_of
from ppokit.engine import barrier, rank, world_size
from ppokit.models.folders import WeightsError, load_weights

logger = logging.getLogger("ppokit")

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


def refresh_master_weights(engine) -> None:
    """After writing module weights directly, copy them into ZeRO's fp32 master partitions (if any)."""
    optimizer = getattr(engine, "optimizer", None)
    if hasattr(optimizer, "refresh_fp32_params"):
        optimizer.refresh_fp32_params()




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
    if recorded is None or recorded == fingerprint_of(session.producer):
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
    st = session.learner
    schedules = saved.get("schedules") or {}
    engine = st.policy.engine
    check_same_sizes(path, "actor", engine.module, "actor_model_name_or_path", saved["args"])
    if st.critic is not None:
        check_same_sizes(path, "critic", st.critic.engine.module, "critic_model_name_or_path", saved["args"])
    if (path / "actor_ds").is_dir():
        wanted = optimizer_settings(engine)  # what the current arguments built; the checkpoint's replace them
        with reading(path / "actor_ds"):
            load, _ = engine.load_checkpoint(str(path / "actor_ds"), tag="state", load_optimizer_states=True,
                                             load_lr_scheduler_states=True)
        if load is None:
            raise DamagedCheckpointError(f"DeepSpeed found no state in {path / 'actor_ds'}", path)
        reapply_optimizer_settings(engine, wanted, "actor", announce=is_rank0())
    else:
        missing_optimizer_state(path, "actor", saved["args"], bool(session.args.force_resume))
        adapter = path / "actor_adapter"
        try:
            load_weights(engine.module, adapter if hasattr(engine.module, "peft_config") else path / "actor")
        except WeightsError as exc:
            raise CheckpointError(str(exc)) from exc
        refresh_master_weights(engine)
        fast_forward_schedule(engine, schedules.get("actor"))
    if st.critic is not None:
        wanted = optimizer_settings(st.critic.engine)
        with reading(path / ("critic_ds" if (path / "critic_ds").is_dir() else "critic")):
            st.critic.load(path)
        reapply_optimizer_settings(st.critic.engine, wanted, "critic", announce=is_rank0())
        if not (path / "critic_ds").is_dir():
            refresh_master_weights(st.critic.engine)
            fast_forward_schedule(st.critic.engine, schedules.get("critic"))
    st.publish(weights_changed=True)  # the producer pulls them before its next batch


def resume_into(session, spec) -> Path:
    """Load a checkpoint into a freshly built Session so the next step is the one the run would have taken.

    All ranks call it. Rows after the checkpoint's step are dropped from metrics.jsonl and samples.jsonl.
    With `auto`, a damaged checkpoint is skipped (with a warning) for the next older one.
    """
    claim_output_dir(session.args, resuming=True, doing="resuming")  # a live run's checkpoints and rows are its own
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
            logger.warning("resume_from_checkpoint=auto skips %s: %s", candidate.name, exc.problem)
    try:
        return resume_from(session, candidates[-1])
    except DamagedCheckpointError as exc:  # the last one: say that there is nothing older, not "try auto"
        raise exc.under_auto(complete_checkpoints(session.args.output_dir)) from None


def resume_from(session, path: Path) -> Path:
    """`resume_into` for one checkpoint folder."""
    saved = read_state(path, STATE_FILE)
    if saved.get("format", 1) > FORMAT_VERSION:
        raise CheckpointError(f"{path} was written by a newer ppokit (checkpoint format {saved['format']}); "
                              "upgrade ppokit to resume it")
    check_arguments(path, saved["args"], session.args)
    check_same_data(path, saved, session)
    world = world_size()
    if saved.get("world_size", world) != world:
        raise CheckpointError(f"{path} was saved by {saved['world_size']} processes but this run has {world}; "
                              "resume with the same number of processes")
    states = saved["parts"] if saved.get("format", 1) >= 3 else legacy_parts(saved)  # formats 1, 2 converted
    parts = {p.name: p for p in parts_of(session, path)}
    per_rank = {name: load_part_file(path, part) for name, part in parts.items() if part.per_rank}
    load_actor(session, path, saved)
    for name, part in parts.items():
        if name in ("tracker", "rng"):
            continue  # the tracker after newer checkpoints are moved aside; the RNGs last of all
        state = per_rank.get(name) if part.per_rank else states.get(name)
        if state is None:
            note_missing_part(path, name)
        else:
            part.obj.load_state_dict(state)
    newer = [p for p in complete_checkpoints(path.parent) if p.name != path.name
             and int(p.name.split("-")[1]) > session.global_step]
    barrier()  # every rank has loaded before rank 0 moves anything
    if newer and is_rank0() and path.parent.resolve() == Path(session.args.output_dir).resolve():
        abandon_newer(path.parent, path, newer)
    parts["tracker"].obj.load_state_dict(states["tracker"])  # opened (continuing the files) before the RNGs
    parts["rng"].obj.load_state_dict(per_rank["rng"])
    logger.info("resumed from %s at step %d", path, session.global_step)
    return path


def load_part_file(path: Path, part) -> dict | None:
    """A per-rank part's saved state (None when the checkpoint has none; the RNG state must be there)."""
    file = path / part.where(rank())
    if part.name != "rng" and not file.exists():
        return None
    with reading(file):
        return torch.load(file, weights_only=False)


def note_missing_part(path: Path, name: str) -> None:
    """A part this Session has that the checkpoint does not hold (e.g. a queue added after it was written)."""
    if name != "run_plan":  # checkpoints of format 1 may lack it
        logger.warning("%s holds no state for %r; it starts afresh", path.name, name)


def resume_session(cls, output_dir: str, overrides: dict):
    """`Session.resume`: rebuild the run saved in `output_dir` (its newest complete checkpoint, or the
    `checkpoint-<step>` folder given) from the checkpoint's own arguments and `overrides`, then load it."""
    from ppokit.args import load_arguments
    from ppokit.training.live import follow_taken_steps

    is_run = not str(output_dir).rstrip("/").split("/")[-1].startswith("checkpoint-")
    path = find_checkpoint("auto", output_dir) if is_run else find_checkpoint(output_dir, output_dir)
    try:
        saved = read_state(path, STATE_FILE).get("config", {})
    except DamagedCheckpointError as exc:  # auto skipped every newer one already: nothing older is readable
        raise exc.under_auto(complete_checkpoints(output_dir)) if is_run else exc from None
    saved["output_dir"] = str(path.parent)  # where the run is now, also when its folder was moved or copied
    saved.update(overrides)
    session = cls(load_arguments(None, overrides=saved))
    resume_into(session, "auto" if is_run else path)  # auto: a damaged newest checkpoint falls back
    follow_taken_steps(session)  # a run with phases called by hand: its schedules as they were when saved
    return session
