"""Issue 38's checkpoint cases: a full disk during DeepSpeed's write, a real size estimate, a checkpoint without
actor_ds/, a checkpoint of another model size, a resume past max_steps, and the save note said once."""

from __future__ import annotations

import logging
import shutil
from collections import namedtuple
from pathlib import Path

import pytest
from checkpoint_helpers import tiny_config

from ppokit.args import load_arguments
from ppokit.checkpoint import (
    CheckpointError,
    DamagedCheckpointError,
    DiskFullError,
    checkpoint_bytes,
    resume_into,
)
from ppokit.checkpoint.guard import ModelMismatchError
from ppokit.checkpoint.run import check_output_dir
from ppokit.session import Session
from ppokit.testing import save_tiny_model

Usage = namedtuple("Usage", "total used free")


def session(model_path, folder, **extra) -> Session:
    return Session(load_arguments(None, overrides=tiny_config(model_path, folder, **extra)))


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_disk_full_inside_deepspeeds_write_is_a_sentence_and_leaves_no_tmp_folder(tiny_model_dir, tmp_path,
                                                                                  monkeypatch):
    s = session(tiny_model_dir, tmp_path, max_steps=2)
    s.step()
    engine = s.state.policy.engine

    def full(save_dir, tag=None, **kwargs):  # torch's zip writer as the disk fills: half a file, no errno
        Path(save_dir, tag).mkdir(parents=True, exist_ok=True)
        Path(save_dir, tag, "mp_rank_00_model_states.pt").write_bytes(b"PK" + b"\0" * 1000)
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 1472 vs 1380")

    monkeypatch.setattr(engine, "save_checkpoint", full)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 4096, 4096))
    with pytest.raises(DiskFullError) as info:
        s.save()
    text = str(info.value)
    assert "the disk is full: writing checkpoint-1" in text and "4 KiB is free" in text, text
    assert "0.00 GiB" not in text and f"about {checkpoint_bytes(s) / 2**20:.3g} MiB" in text, text
    out = tmp_path / "out"
    assert not list(out.glob(".tmp-checkpoint-*")) and not (out / "checkpoint-1").exists()


def test_the_free_space_precheck_names_real_sizes(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(CheckpointError, match=r"has 1000 bytes free but a checkpoint needs about 4.77 MiB"):
        check_output_dir(tmp_path / "out", 5_000_000)


@pytest.mark.parametrize("extra", [{}, {"ignore_save_lr_and_optim": True}], ids=["optimizer", "weights-only"])
def test_the_size_estimate_is_within_a_quarter_of_a_real_checkpoint(tiny_model_dir, tmp_path, extra):
    s = session(tiny_model_dir, tmp_path, max_steps=2, **extra)
    s.step()
    real = folder_bytes(s.save())
    assert 0.75 * real <= checkpoint_bytes(s) <= 1.25 * real, (checkpoint_bytes(s), real)


def test_a_checkpoint_without_actor_ds_says_what_is_missing(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=2)
    s.step()
    path = s.save()
    s.close()
    shutil.rmtree(path / "actor_ds")
    with pytest.raises(DamagedCheckpointError) as info:
        Session.resume(str(tmp_path / "out"))
    text = str(info.value)
    assert "has no actor_ds/ folder" in text and "ignore_save_lr_and_optim was not set" in text, text
    assert "--force_resume true" in text
    r = Session.resume(str(tmp_path / "out"), force_resume=True)  # continues from actor/'s weights
    assert r.global_step == 1


def test_a_checkpoint_of_another_model_size_is_not_called_damaged(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=2)
    s.step()
    path = s.save()
    s.close()
    wider = save_tiny_model(tmp_path / "wider", seed=0, hidden=32)
    other = session(wider, tmp_path, max_steps=2, force_resume=True)
    with pytest.raises(ModelMismatchError) as info:
        resume_into(other, str(path))
    text = str(info.value)
    assert "other sizes" in text and "damaged" not in text, text
    assert "model.embed_tokens.weight is [" in text and "actor_model_name_or_path" in text, text


def test_resuming_past_max_steps_is_a_sentence(tiny_model_dir, tmp_path):
    session(tiny_model_dir, tmp_path, max_steps=2, save_strategy="steps", save_steps=2).train()
    shorter = session(tiny_model_dir, tmp_path, max_steps=1, resume_from_checkpoint="auto")
    with pytest.raises(CheckpointError, match=r"checkpoint-2 is at step 2 but this run has 1 steps.*max_steps above 2"):
        shorter.train()


def test_the_checkpoint_note_is_said_at_the_first_save_only(tiny_model_dir, tmp_path, caplog):
    s = session(tiny_model_dir, tmp_path, max_steps=3)
    with caplog.at_level(logging.INFO, logger="ppokit"):
        s.step()
        s.save()
        s.step()
        s.save()
    saved = [r.getMessage() for r in caplog.records if r.getMessage().startswith("saved ")]
    assert len(saved) == 2 and "ignore_save_lr_and_optim" in saved[0] and "ignore_save_lr_and_optim" not in saved[1]
    assert len(saved[1]) < 120, saved[1]
