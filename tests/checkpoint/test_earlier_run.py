"""No entry point erases a run's records unasked (issue 38 "data loss", issue 39 item 1): a finished run's and a
live run's metrics.jsonl / samples.jsonl survive a new Session's step(), evaluate(), save() and train();
overwrite_output_dir replaces them; a resume continues them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from checkpoint_helpers import metrics_rows, tiny_config

from ppokit.args import load_arguments
from ppokit.checkpoint import complete_checkpoints
from ppokit.checkpoint.claim import EarlierRunError
from ppokit.checkpoint.lock import LOCK_FILE, OutputDirError
from ppokit.session import Session


def session(model_path, folder, **extra) -> Session:
    return Session(load_arguments(None, overrides=tiny_config(model_path, folder, **extra)))


def eval_file(folder) -> str:
    path = folder / "eval.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"count to {i}:"}) + "\n" for i in range(2)))
    return str(path)


def records(out) -> dict[str, str]:
    return {name: (out / name).read_text() for name in ("metrics.jsonl", "samples.jsonl") if (out / name).exists()}


@pytest.fixture
def finished_run(tiny_model_dir, tmp_path):
    """A run of 2 steps trained to its end (checkpoint-2, final model, 2 metrics rows)."""
    session(tiny_model_dir, tmp_path, max_steps=2).train()
    out = tmp_path / "out"
    assert sorted(metrics_rows(out)) == [1, 2]
    return out


@pytest.mark.parametrize("call", ["step", "evaluate", "save", "train"])
def test_a_finished_runs_records_survive_a_new_session(finished_run, tiny_model_dir, tmp_path, call):
    before = records(finished_run)
    s = session(tiny_model_dir, tmp_path, max_steps=4, eval_datasets=eval_file(tmp_path))
    with pytest.raises(EarlierRunError) as info:
        getattr(s, call)()
    text = str(info.value)
    for choice in (f"Session.resume('{finished_run}')", "another output_dir", "overwrite_output_dir: true",
                   "metrics.jsonl", "checkpoint-2"):
        assert choice in text
    assert records(finished_run) == before
    assert [p.name for p in complete_checkpoints(finished_run)] == ["checkpoint-2"]


def test_a_live_runs_records_survive_every_entry_point(tiny_model_dir, tmp_path):
    """A run still training under its lock (another live process) with a step logged, no checkpoint yet."""
    out = tmp_path / "out"
    out.mkdir(parents=True)
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": 1.0, "reward/mean": 0.5}) + "\n")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (out / LOCK_FILE).write_text(json.dumps({"pid": other.pid, "host": os.uname().nodename, "started": "x"}))
        before = records(out)
        for call in ("step", "evaluate", "save", "train"):
            s = session(tiny_model_dir, tmp_path, max_steps=1, eval_datasets=eval_file(tmp_path))
            with pytest.raises(OutputDirError, match=f"process {other.pid}"):
                getattr(s, call)()
        with pytest.raises(OutputDirError, match="still training"):
            from ppokit.checkpoint import resume_into

            resume_into(session(tiny_model_dir, tmp_path, max_steps=1), "auto")
        assert records(out) == before and (out / LOCK_FILE).exists()
    finally:
        other.kill()
        other.wait()


def test_overwrite_output_dir_replaces_the_earlier_run(finished_run, tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=3, overwrite_output_dir=True, save_strategy="no")
    s.step()
    assert sorted(metrics_rows(finished_run)) == [1]  # the new run's row only
    assert not complete_checkpoints(finished_run)  # the earlier run's checkpoint is gone with it
    s.step()
    assert sorted(metrics_rows(finished_run)) == [1, 2]  # the Session's own rows are never refused


def test_a_resume_continues_the_files(finished_run, tiny_model_dir):
    before = metrics_rows(finished_run)
    r = Session.resume(str(finished_run), max_steps=3)
    r.step()
    after = metrics_rows(finished_run)
    assert sorted(after) == [1, 2, 3] and {k: after[k] for k in (1, 2)} == before


def test_auto_after_an_interrupted_run_without_a_checkpoint_starts_over(tiny_model_dir, tmp_path):
    """A run killed before its first checkpoint has nothing to resume: `auto` re-makes its rows from step 0."""
    out = tmp_path / "out"
    out.mkdir(parents=True)
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": 1.0, "reward/mean": 0.5}) + "\n")
    session(tiny_model_dir, tmp_path, max_steps=1, resume_from_checkpoint="auto", save_strategy="no").train()
    assert sorted(metrics_rows(out)) == [1] and json.loads((out / "metrics.jsonl").read_text())["reward/mean"] != 0.5


def test_run_ppo_refuses_a_finished_runs_folder_before_loading_the_model(finished_run, tiny_model_dir, tmp_path):
    """The console a person sees: the refusal sentence, and no "loading <model>" stage before it."""
    from checkpoint_helpers import write_config

    config = write_config(tmp_path, tiny_config(tiny_model_dir, tmp_path, max_steps=4))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT")}
    done = subprocess.run([sys.executable, "run_ppo.py", config], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"error: output_dir {finished_run} holds an earlier run" in done.stderr
    assert "ppokit: loading" not in done.stderr and "starting the process group" not in done.stderr
