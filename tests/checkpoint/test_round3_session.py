"""Hardening round 3 (issue 25) through the Session API on a tiny model: the output folder is the run's alone,
non-finite weights are never published, a full disk is one sentence, resume checks the data's content, and
score()/evaluate() misuse."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkpoint_helpers import tiny_config, weights

from ppokit.args import load_arguments
from ppokit.checkpoint import CheckpointError, complete_checkpoints
from ppokit.checkpoint.lock import LOCK_FILE, OutputDirError, RunLock
from ppokit.checkpoint.safety import DiskFullError, NonFiniteWeightsError
from ppokit.errors import PpokitError
from ppokit.export import ExportError, export
from ppokit.session import Session


def session(model_path, folder, **extra) -> Session:
    return Session(load_arguments(None, overrides=tiny_config(model_path, folder, **extra)))


def listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


# ------------------------------------------------------------------ case 1: output_dir is a model folder


def test_output_dir_equal_to_the_model_folder_is_refused_before_anything_is_written(tiny_model_dir, tmp_path):
    before = listing(Path(tiny_model_dir))
    s = session(tiny_model_dir, tmp_path, output_dir=tiny_model_dir, max_steps=1)
    with pytest.raises(OutputDirError, match="is the model folder .*actor_model_name_or_path.*overwrite"):
        s.train()
    assert listing(Path(tiny_model_dir)) == before  # not one file added or touched


@pytest.mark.parametrize("where", ["inside", "contains"])
def test_output_dir_inside_or_around_the_model_folder_is_refused(tiny_model_dir, tmp_path, where):
    from types import SimpleNamespace

    from ppokit.checkpoint.lock import check_not_model_folder

    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    out = model / "out" if where == "inside" else tmp_path / "models"
    with pytest.raises(OutputDirError, match=f"output_dir {out} {'is inside' if where == 'inside' else 'contains'}"):
        check_not_model_folder(SimpleNamespace(output_dir=str(out), actor_model_name_or_path=str(model)))
    check_not_model_folder(SimpleNamespace(output_dir=str(tmp_path / "elsewhere"), actor_model_name_or_path=str(model)))


# ------------------------------------------------------------------ case 2: one run per output_dir


def test_a_second_run_into_a_live_output_dir_stops_naming_the_other_process(tiny_model_dir, tmp_path):
    out = tmp_path / "out"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out.mkdir()
        (out / LOCK_FILE).write_text(json.dumps({"pid": other.pid, "host": os.uname().nodename,
                                                 "started": "2026-01-01 00:00:00 UTC"}))
        s = session(tiny_model_dir, tmp_path, max_steps=1)
        with pytest.raises(OutputDirError, match=f"in use by another run: process {other.pid} on "):
            s.train()
        assert not (out / "metrics.jsonl").exists() and not complete_checkpoints(out)
    finally:
        other.kill()
        other.wait()


def test_the_lock_is_exclusive_and_a_dead_runs_lock_is_taken_over(tmp_path, caplog):
    first = RunLock(tmp_path).acquire()
    with pytest.raises(OutputDirError, match=f"process {os.getpid()} on "):
        RunLock(tmp_path).acquire()
    first.release()
    assert not (tmp_path / LOCK_FILE).exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename, "started": "x"}))
    with caplog.at_level("WARNING", logger="ppokit"):
        lock = RunLock(tmp_path).acquire()
    assert "stale" in caplog.text and json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()


def test_the_lock_is_released_when_the_run_ends(tiny_model_dir, tmp_path):
    session(tiny_model_dir, tmp_path, max_steps=1, save_strategy="no").train()
    assert not (tmp_path / "out" / LOCK_FILE).exists()
    session(tiny_model_dir, tmp_path, max_steps=1, save_strategy="no", overwrite_output_dir=True).train()  # may use it


# ------------------------------------------------------------------ case 3: non-finite weights


def test_a_diverged_run_stops_with_a_sentence_and_publishes_no_nan_model(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, learning_rate=1e30, max_steps=1, warmup_ratio=0.0,
                lr_scheduler_type="constant")
    with pytest.raises(NonFiniteWeightsError, match="NaN or inf after step 1 .*checkpoint-1 was not written.*start again"):
        s.train()
    out = tmp_path / "out"
    assert not list(out.glob("*.safetensors")) and not (out / "config.json").exists()
    assert not complete_checkpoints(out)


def test_a_nan_loss_later_in_the_run_is_a_sentence_naming_the_step(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, learning_rate=1e30, max_steps=3, save_steps=1, warmup_ratio=0.0,
                lr_scheduler_type="constant")
    with pytest.raises(PpokitError, match="NaN|nan|inf") as info:
        s.train()
    assert "step" in str(info.value) and "no checkpoint was saved" in str(info.value)
    assert not complete_checkpoints(tmp_path / "out")  # step 1's weights were already NaN: nothing saved


def test_export_refuses_nan_weights(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=1)
    with torch.no_grad():
        next(s.model.parameters()).fill_(float("nan"))
    from ppokit.models.folders import save_hf

    save_hf(s.model, s.tokenizer, tmp_path / "nan-model")
    with pytest.raises(ExportError, match="NaN or inf weights"):
        export(tmp_path / "nan-model", tmp_path / "exported")
    assert not (tmp_path / "exported").exists() and not list(tmp_path.glob(".tmp-export-*"))


# ------------------------------------------------------------------ case 9: disk full


def enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_disk_full_during_a_checkpoint_is_one_sentence_and_leaves_nothing(tiny_model_dir, tmp_path, monkeypatch):
    s = session(tiny_model_dir, tmp_path, max_steps=1)
    s.step()
    monkeypatch.setattr("torch.save", enospc)
    with pytest.raises(DiskFullError, match=r"disk is full: writing checkpoint-1 in .*needs about [\d.]+ (GiB|MiB|KiB)"):
        s.save()
    out = tmp_path / "out"
    assert not list(out.glob(".tmp-checkpoint-*")) and not (out / "checkpoint-1").exists()


def test_disk_full_during_the_final_save_leaves_no_config_without_weights(tiny_model_dir, tmp_path, monkeypatch):
    s = session(tiny_model_dir, tmp_path, max_steps=1, save_strategy="no")
    s.step()

    def half_written(module, tokenizer, folder):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")
        enospc()

    monkeypatch.setattr("ppokit.checkpoint.run.save_hf", half_written)
    with pytest.raises(DiskFullError, match="writing the final model"):
        s.save(final=True)
    out = tmp_path / "out"
    assert not (out / "config.json").exists() and not (out / ".tmp-final-model").exists()
    monkeypatch.undo()
    s.save(final=True)
    assert (out / "config.json").is_file() and weights(out)  # the real save publishes config and weights


# ------------------------------------------------------------------ case 6: resume checks the data's content


def test_resume_with_same_size_but_different_data_is_refused(tiny_model_dir, tmp_path):
    session(tiny_model_dir, tmp_path, max_steps=2, save_steps=2).train()
    config = tiny_config(tiny_model_dir, tmp_path, max_steps=4, save_steps=2, resume_from_checkpoint="auto")
    data = Path(config["train_datasets"])  # tiny_config has just rewritten the original rows
    text = data.read_text()
    data.write_text(text.replace("say a 1:", "say b 1:"))  # same size, same row count
    assert len(data.read_text()) == len(text)
    with pytest.raises(CheckpointError, match="trained on other data.*force_resume"):
        Session(load_arguments(None, overrides=config)).train()
    data.write_text(text)  # the original data resumes
    Session(load_arguments(None, overrides={**config, "max_steps": 3})).train()
    assert (tmp_path / "out" / "config.json").is_file()


# ------------------------------------------------------------------ case 13: score(None), evaluate after eval_datasets


def test_score_none_is_a_sentence(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path)
    with pytest.raises(PpokitError, match=r"score\(\) needs the batch that rollout\(\) returned, got NoneType"):
        s.score(None)


def test_evaluate_loads_eval_datasets_set_after_the_session_was_built(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path)
    evals = tmp_path / "eval.jsonl"
    evals.write_text("".join(json.dumps({"prompt": f"count {i}:"}) + "\n" for i in range(3)))
    s.args.eval_datasets = str(evals)
    metrics = s.evaluate()
    assert metrics["eval/prompts"] == 3.0


def test_disk_full_during_an_export_leaves_no_partial_folder(tiny_model_dir, tmp_path, monkeypatch):
    from transformers import PreTrainedModel

    def half_written(self, folder, **kwargs):
        (Path(folder) / "config.json").write_text("{}")
        enospc()

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", half_written)
    with pytest.raises(ExportError, match="disk is full: writing the export exported .*another --out"):
        export(tiny_model_dir, tmp_path / "exported")
    assert not (tmp_path / "exported").exists() and not list(tmp_path.glob(".tmp-export-*"))
