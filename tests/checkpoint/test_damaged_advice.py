"""A damaged checkpoint's error says what exists (issue 47, class 5): an older checkpoint is suggested only when there
is one, 'auto' only when the resume was not automatic already; when every checkpoint is damaged the sentence says
there is nothing to fall back to. Driven by run_ppo.py and Session.resume on a real run's checkpoints."""

import shutil
import subprocess
import sys

import pytest
from checkpoint_helpers import REPO, child_env, run_ppo, tiny_config, write_config

from ppokit.checkpoint.guard import DamagedCheckpointError
from ppokit.session import Session


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """run_ppo.py's 4-step run with checkpoint-2 and checkpoint-4, and its config file."""
    folder = tmp_path_factory.mktemp("run")
    config = write_config(folder, tiny_config(tiny_model_dir, folder, max_steps=4, save_steps=2))
    run_ppo(config)
    return folder, config


def copy_of(trained, tmp_path):
    folder, config = trained
    out = tmp_path / "out"
    shutil.copytree(folder / "out", out)
    return out, config


def resume(config: str, out, spec: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "run_ppo.py"), config, "--output_dir", str(out),
                           "--resume_from_checkpoint", spec, "--max_steps", "6"], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr[done.stderr.index("error: "):]


def test_run_ppo_says_what_exists_when_checkpoints_are_damaged(trained, tmp_path):
    out, config = copy_of(trained, tmp_path)
    (out / "checkpoint-4" / "trainer_state.json").write_text("")
    newest = resume(config, out, str(out / "checkpoint-4"))
    assert "checkpoint-4/trainer_state.json cannot be read as JSON" in newest
    assert "resume an older one (checkpoint-2), or with 'auto'" in newest, newest
    (out / "checkpoint-2" / "trainer_state.json").write_text("{")
    oldest = resume(config, out, "checkpoint-2")
    assert f"{out} holds no older checkpoint; restore its files from a copy, or start from step 0" in oldest, oldest
    everything = resume(config, out, "auto")
    assert (f"resume_from_checkpoint=auto could read none of the checkpoints in {out} (checkpoint-2, checkpoint-4), "
            "so there is no older one to fall back to; restore its files") in everything, everything
    for wrong in ("with 'auto'", "resume an older", "older checkpoint-<step>"):
        assert wrong not in oldest + everything


def test_session_resume_of_every_damaged_deepspeed_state_says_there_is_nothing_older(trained, tmp_path):
    out, _ = copy_of(trained, tmp_path)
    for step in (2, 4):
        states = out / f"checkpoint-{step}" / "actor_ds" / "state" / "mp_rank_00_model_states.pt"
        states.write_bytes(states.read_bytes()[:100])
    with pytest.raises(DamagedCheckpointError) as info:
        Session.resume(str(out))
    text = str(info.value)
    assert "mp_rank_00_model_states.pt is missing or not a complete torch file" in text
    assert "could read none of the checkpoints" in text and "with 'auto'" not in text, text


def test_the_only_checkpoint_without_its_optimizer_state_keeps_its_own_remedy(trained, tmp_path):
    out, _ = copy_of(trained, tmp_path)
    shutil.rmtree(out / "checkpoint-2")
    shutil.rmtree(out / "checkpoint-4" / "actor_ds")
    with pytest.raises(DamagedCheckpointError) as info:
        Session.resume(str(out))
    text = str(info.value)
    assert "has no actor_ds/ folder" in text and f"it is the only checkpoint in {out}" in text, text
    assert "copy it back, or pass --force_resume true" in text and "resume an older" not in text, text
