"""Checkpoints that survive crashes, exact resume, and the final HF export.

Layout: `output_dir/checkpoint-<step>/` holding
  actor/            HF model folder (safetensors) + tokenizer — loadable on its own
  actor_ds/         DeepSpeed checkpoint (module, optimizer, LR scheduler; ZeRO shards when sharded)
  critic/ critic_ds/ the same for the critic (PPO)
  trainer_state.json  step, counters, loader/KL/normaliser state, resolved arguments — written LAST
  rng_state_<rank>.pt python/numpy/torch RNG states
A checkpoint is written into `.tmp-checkpoint-<step>` and renamed when complete, so a crash or SIGKILL
mid-save never leaves a folder that looks complete; older ones are pruned only after the rename.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

logger = logging.getLogger("ppokit")

STATE_FILE = "trainer_state.json"
# Keys whose change alters what a run means; resuming across them needs --force_resume.
MEANING_KEYS = (
    "actor_model_name_or_path", "critic_model_name_or_path", "reward_model_name_or_path", "rl_algorithm",
    "train_datasets", "train_task_config", "prompt_key", "response_key", "global_batch_size",
    "global_mini_batch_size", "per_device_prompt_batch_size", "per_device_train_batch_size",
    "gradient_accumulation_steps", "rollout_n", "update_iters", "seed", "lora_rank", "policy_loss",
    "loss_agg_mode", "max_prompt_len", "max_dec_len", "use_rm_server", "reward_functions", "task",
)


class CheckpointError(Exception):
    """A checkpoint cannot be used (missing, incomplete, or made with different arguments)."""


def is_rank0() -> bool:
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def barrier() -> None:
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def fsync_tree(path: Path) -> None:
    """Flush every file under `path` to disk so a rename after it publishes complete data."""
    for root, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())


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


def complete_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete `checkpoint-<step>` folders in `output_dir`, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if m and (child / STATE_FILE).is_file():
            found.append((int(m.group(1)), child))
    return [p for _, p in sorted(found)]


def trainer_state(session) -> dict:
    st = session.state
    return {
        "global_step": session.global_step,
        "rollouts_drawn": st.rollouts_drawn,
        "updates_done": st.updates_done,
        "skipped_groups": st.skipped_groups,
        "loader": st.loader.state_dict(),
        "kl_ctl": st.kl_ctl.state_dict(),
        "reward_normalizer": st.reward_normalizer.state_dict() if st.reward_normalizer is not None else None,
        "ptx_loader": st.ptx_loss.loader.state_dict() if st.ptx_loss is not None else None,
        "history": session.history,
        "args": session.args.to_dict(),
        "config": session.args.to_config(),  # only the keys that were set: rebuilds the same batch mode
    }


def save_hf(module, tokenizer, out: Path) -> None:
    """A plain HF folder (safetensors); LoRA adapters merged into a copy when present."""
    model = module
    if hasattr(model, "merge_and_unload"):
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    model.save_pretrained(out, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def save_checkpoint(session) -> Path:
    """Write `checkpoint-<step>` atomically and prune to `save_total_limit`; returns its path."""
    args, st = session.args, session.state
    root = Path(args.output_dir)
    final = root / f"checkpoint-{session.global_step}"
    tmp = root / f".tmp-checkpoint-{session.global_step}"
    if is_rank0():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    engine = st.policy.engine
    if args.ignore_save_lr_and_optim:
        if is_rank0():
            save_hf(engine.module, st.policy.tokenizer, tmp / "actor")
    else:
        engine.save_checkpoint(str(tmp / "actor_ds"), tag="state")
        if is_rank0():
            save_hf(engine.module, st.policy.tokenizer, tmp / "actor")
    if st.critic is not None:
        st.critic.save(tmp, args.ignore_save_lr_and_optim)
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    torch.save(rng_state(), tmp / f"rng_state_{rank}.pt")
    barrier()
    if is_rank0():
        (tmp / STATE_FILE).write_text(json.dumps(trainer_state(session), indent=1, default=str))
        fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        prune(root, args.save_total_limit)
    barrier()
    logger.info("saved %s", final)
    return final


def prune(root: Path, limit: int | None) -> None:
    """Delete the oldest complete checkpoints beyond `limit` (after the new one is complete)."""
    if not limit or limit <= 0:
        return
    for old in complete_checkpoints(root)[:-limit]:
        shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(spec, output_dir: str | Path) -> Path:
    """`resume_from_checkpoint` → a checkpoint folder: a path, or true/"auto" for the newest complete one."""
    if spec is True or str(spec).lower() in ("true", "auto", "1", "yes", "latest"):
        found = complete_checkpoints(output_dir)
        if not found:
            raise CheckpointError(f"resume_from_checkpoint=auto: no complete checkpoint-<step> folder in {output_dir}")
        return found[-1]
    path = Path(str(spec))
    if not path.is_dir():
        raise CheckpointError(f"resume_from_checkpoint: {path} is not a folder")
    if not (path / STATE_FILE).is_file():
        found = complete_checkpoints(path)
        if found:
            return found[-1]
        raise CheckpointError(f"{path} is not a complete checkpoint (no {STATE_FILE}); it may be from an interrupted save")
    return path


HARMLESS_PREFIXES = ("logging_", "eval_", "save_", "report_to", "disable_tqdm", "do_eval", "output_dir", "run_name")


def changed_meaning_keys(saved: dict, current: dict) -> list[str]:
    """Keys that differ between the checkpoint's arguments and now and change the run's meaning."""
    return [k for k in MEANING_KEYS if k in saved and k in current and saved[k] != current[k]]


def resume_into(session, spec) -> Path:
    """Load a checkpoint into a freshly built Session so the next step is the one the run would have taken."""
    args, st = session.args, session.state
    path = find_checkpoint(spec, args.output_dir)
    saved = json.loads((path / STATE_FILE).read_text())
    changed = changed_meaning_keys(saved["args"], args.to_dict())
    if changed and not args.force_resume:
        lines = ", ".join(f"{k}: {saved['args'][k]!r} -> {args.to_dict()[k]!r}" for k in changed)
        raise CheckpointError(
            f"{path} was made with different arguments that change the run's meaning ({lines}); "
            "restore them or pass --force_resume true to resume anyway"
        )
    engine = st.policy.engine
    if (path / "actor_ds").is_dir():
        engine.load_checkpoint(str(path / "actor_ds"), tag="state", load_optimizer_states=True,
                               load_lr_scheduler_states=True)
    else:
        load_weights(engine.module, path / "actor")
    if st.critic is not None:
        st.critic.load(path)
    st.rollout_engine.update_weights(engine.module)
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
    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    set_rng_state(torch.load(path / f"rng_state_{rank}.pt", weights_only=False))
    session.tracker.truncate_after(session.global_step)
    logger.info("resumed from %s at step %d", path, session.global_step)
    return path


def load_weights(module, folder: Path) -> None:
    """Load HF safetensors weights from `folder` into `module` (LoRA-wrapped or plain)."""
    from safetensors.torch import load_file

    state = {}
    for f in sorted(folder.glob("*.safetensors")):
        state.update(load_file(f))
    target = module.get_base_model() if hasattr(module, "get_base_model") else module
    missing, unexpected = target.load_state_dict(state, strict=False)
    real_missing = [k for k in missing if "lm_head" not in k]
    if real_missing:
        raise CheckpointError(f"{folder}: weights missing for {real_missing[:5]}")


def check_output_dir(output_dir: str | Path, need_bytes: int) -> None:
    """Fail before training when `output_dir` is not writable or the disk is too small for a checkpoint."""
    root = Path(output_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".ppokit-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise CheckpointError(f"output_dir {root} is not writable ({exc.strerror}); choose another output_dir") from exc
    free = shutil.disk_usage(root).free
    if free < need_bytes:
        raise CheckpointError(
            f"output_dir {root} has {free / 2**30:.2f} GiB free but a checkpoint needs about "
            f"{need_bytes / 2**30:.2f} GiB; free space or choose another output_dir"
        )
