"""run_ppo.py killed with SIGKILL (after a checkpoint, or in the middle of writing one) and resumed with
`--resume_from_checkpoint auto` ends bitwise where the uninterrupted run ends, with the same metrics."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from checkpoint_helpers import (
    REPO,
    assert_bitwise_equal,
    max_abs_diff,
    metrics_rows,
    run_and_kill_when,
    run_ppo,
    run_python,
    tail,
    tiny_config,
    weights,
    write_config,
)

from ppokit.checkpoint import complete_checkpoints, find_checkpoint


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory) -> Path:
    """The uninterrupted 10-step run's output_dir."""
    folder = tmp_path_factory.mktemp("reference")
    run_ppo(write_config(folder, tiny_config(tiny_model_dir, folder)))
    return folder / "out"


def optimizer_state(checkpoint: Path) -> dict:
    saved = torch.load(checkpoint / "actor_ds" / "state" / "mp_rank_00_model_states.pt", weights_only=False)
    return {"optimizer": saved["optimizer"]["state"], "lr_scheduler": saved["lr_scheduler"],
            "global_steps": saved["global_steps"]}


def assert_same_run(reference: Path, out: Path, resumed_at: int) -> None:
    """Final weights, checkpoint-10's weights and optimizer state bitwise equal; metrics equal after the resume."""
    assert_bitwise_equal(weights(reference), weights(out))
    assert_bitwise_equal(weights(reference / "checkpoint-10" / "actor"), weights(out / "checkpoint-10" / "actor"))
    ref_opt, opt = optimizer_state(reference / "checkpoint-10"), optimizer_state(out / "checkpoint-10")
    assert ref_opt["lr_scheduler"] == opt["lr_scheduler"]
    assert ref_opt["global_steps"] == opt["global_steps"] == 20  # 2 mini-batches per step
    for index, ref_state in ref_opt["optimizer"].items():
        for name, value in ref_state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(opt["optimizer"][index][name])), (index, name)
    ref_rows, rows = metrics_rows(reference), metrics_rows(out)
    assert sorted(rows) == list(range(1, 11))  # the rows the killed run logged after its checkpoint are replaced
    for step in range(resumed_at + 1, 11):
        assert rows[step] == ref_rows[step], step


def test_uninterrupted_run_trains(reference, tiny_model_dir):
    assert max_abs_diff(weights(Path(tiny_model_dir)), weights(reference)) > 1e-3
    rewards = {row["reward/mean"] for row in metrics_rows(reference).values()}
    assert len(rewards) > 1  # the reward varies, so the steps really update the model
    assert [p.name for p in complete_checkpoints(reference)] == [f"checkpoint-{s}" for s in (2, 4, 6, 8, 10)]


def test_sigkill_after_step_6_then_resume_auto_is_bitwise_identical(reference, tiny_model_dir, tmp_path):
    config = write_config(tmp_path, tiny_config(tiny_model_dir, tmp_path))
    out, blocked = tmp_path / "out", tmp_path / "blocked"
    # The 8th reward call (step 8) blocks: checkpoint-6 is complete and step 7 is already logged.
    run_and_kill_when(config, blocked, PPOKIT_TEST_BLOCK_AT_CALL="8", PPOKIT_TEST_BLOCKED_FILE=str(blocked))
    assert [p.name for p in complete_checkpoints(out)] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert max(metrics_rows(out)) == 7
    done = run_ppo(config, "--resume_from_checkpoint", "auto")
    assert f"resumed from {out / 'checkpoint-6'} at step 6" in done.stderr, tail(done)
    assert_same_run(reference, out, resumed_at=6)


KILL_MID_SAVE = textwrap.dedent('''
    """run_ppo.py, but SIGKILLed while checkpoint-4 is being written (all files written, before the rename)."""
    import os, runpy, signal, sys
    from pathlib import Path

    import ppokit.checkpoint.save as checkpoint

    flush = checkpoint.fsync_tree

    def fsync_tree(path):
        if Path(path).name == ".tmp-checkpoint-4":
            os.kill(os.getpid(), signal.SIGKILL)
        flush(path)

    checkpoint.fsync_tree = fsync_tree
    sys.argv = [sys.argv[1], sys.argv[2]]
    runpy.run_path(sys.argv[0], run_name="__main__")
''')


def test_sigkill_during_a_save_resumes_from_the_previous_checkpoint(reference, tiny_model_dir, tmp_path):
    config = write_config(tmp_path, tiny_config(tiny_model_dir, tmp_path))
    out = tmp_path / "out"
    script = tmp_path / "kill_mid_save.py"
    script.write_text(KILL_MID_SAVE)
    done = run_python(str(script), str(REPO / "run_ppo.py"), config)
    assert done.returncode == -9, tail(done)
    assert (out / ".tmp-checkpoint-4" / "trainer_state.json").is_file()  # everything written, never renamed
    assert not (out / "checkpoint-4").exists()
    assert find_checkpoint("auto", out) == out / "checkpoint-2"
    done = run_ppo(config, "--resume_from_checkpoint", "auto")
    assert f"resumed from {out / 'checkpoint-2'} at step 2" in done.stderr, tail(done)
    assert not (out / ".tmp-checkpoint-4").exists()  # cleaned up once a newer checkpoint is complete
    assert_same_run(reference, out, resumed_at=2)
