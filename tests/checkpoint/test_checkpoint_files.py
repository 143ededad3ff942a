"""Which folders count as checkpoints, pruning, atomic publishing and the argument guard's key lists."""

from __future__ import annotations

import json

import pytest

from ppokit.args import Arguments
from ppokit.checkpoint.files import (
    STATE_FILE,
    CheckpointError,
    complete_checkpoints,
    find_checkpoint,
    prune,
    publish,
)
from ppokit.checkpoint.resume import HARMLESS_KEYS, MEANING_KEYS, changed_meaning_keys, is_harmless


def fake_checkpoint(root, step, complete=True, prefix="checkpoint-"):
    path = root / f"{prefix}{step}"
    (path / "actor").mkdir(parents=True)
    (path / "actor" / "model.safetensors").write_bytes(b"x")
    if complete:
        (path / STATE_FILE).write_text(json.dumps({"global_step": step, "args": {}, "loader": {}}))
    return path


def test_auto_skips_what_an_interrupted_save_left(tmp_path):
    fake_checkpoint(tmp_path, 2)
    six = fake_checkpoint(tmp_path, 6)
    fake_checkpoint(tmp_path, 8, complete=False)  # a folder without trainer_state.json
    fake_checkpoint(tmp_path, 8, prefix=".tmp-checkpoint-")  # written fully, never renamed
    fake_checkpoint(tmp_path, 10, prefix=".old-checkpoint-")
    assert complete_checkpoints(tmp_path) == [tmp_path / "checkpoint-2", six]
    assert find_checkpoint("auto", tmp_path) == six
    assert find_checkpoint(True, tmp_path) == six
    assert find_checkpoint(str(tmp_path), "elsewhere") == six  # a folder of checkpoints: its newest
    assert find_checkpoint("checkpoint-2", tmp_path) == tmp_path / "checkpoint-2"  # a name inside output_dir
    with pytest.raises(CheckpointError, match="interrupted save"):
        find_checkpoint(tmp_path / "checkpoint-8", tmp_path)


def test_steps_sort_as_numbers(tmp_path):
    for step in (9, 10, 100):
        fake_checkpoint(tmp_path, step)
    assert find_checkpoint("auto", tmp_path) == tmp_path / "checkpoint-100"


def test_no_checkpoint_is_an_error_that_says_what_to_do(tmp_path):
    with pytest.raises(CheckpointError, match="no complete checkpoint-<step> folder"):
        find_checkpoint("auto", tmp_path)
    with pytest.raises(CheckpointError, match="is not a folder"):
        find_checkpoint(tmp_path / "missing", tmp_path)


def test_prune_keeps_the_newest_and_always_the_one_just_written(tmp_path):
    for step in (2, 4, 6, 8):
        fake_checkpoint(tmp_path, step)
    fake_checkpoint(tmp_path, 10, prefix=".tmp-checkpoint-")
    prune(tmp_path, None)
    assert len(complete_checkpoints(tmp_path)) == 4 and not list(tmp_path.glob(".tmp-*"))
    prune(tmp_path, 2, keep=tmp_path / "checkpoint-8")
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["checkpoint-6", "checkpoint-8"]
    # After resuming from an older checkpoint, the one just written survives even when a newer one exists.
    prune(tmp_path, 1, keep=tmp_path / "checkpoint-6")
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["checkpoint-6"]


def test_publish_replaces_a_checkpoint_of_the_same_step(tmp_path):
    old = fake_checkpoint(tmp_path, 4)
    (old / "stale").write_text("old")
    new = fake_checkpoint(tmp_path, 4, prefix=".tmp-checkpoint-")
    publish(new, old)
    assert not (old / "stale").exists() and (old / STATE_FILE).is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-4"]


def test_guard_key_lists_name_real_arguments():
    fields = Arguments.model_fields
    assert [k for k in MEANING_KEYS if k not in fields] == []
    assert [k for k in HARMLESS_KEYS if k not in fields] == []
    assert not [k for k in MEANING_KEYS if is_harmless(k)]
    assert is_harmless("max_steps") and is_harmless("logging_steps") and is_harmless("eval_steps")
    assert changed_meaning_keys({"rollout_n": 4, "max_steps": 10}, {"rollout_n": 8, "max_steps": 20}) == ["rollout_n"]


def test_auto_skips_a_newest_checkpoint_whose_state_does_not_read(tmp_path, caplog):
    fake_checkpoint(tmp_path, 2)
    four = fake_checkpoint(tmp_path, 4)
    broken = fake_checkpoint(tmp_path, 6)
    (broken / STATE_FILE).write_text('{"global_step": 6, "args"')  # cut off mid-write by a full disk
    assert find_checkpoint("auto", tmp_path) == four
    assert "skips checkpoint-6" in caplog.text and "cannot be read as JSON" in caplog.text
