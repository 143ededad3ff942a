"""Asynchronous settings never change meaning silently (issue 47, class 4): a resume with another staleness_threshold
consumes the saved queue first (k = 0 included), so no prompt is skipped or repeated; k is capped at what the run's
steps can use, with a note; a key with no effect in this configuration says so once."""

import json
import shutil

import torch
from checkpoint_helpers import REPO, child_env, tiny_config, write_config

from ppokit.args import load_arguments
from ppokit.session import Session


def trained_prompts(session: Session, steps: int) -> list[list[str]]:
    """The prompts of each batch the next `steps` steps train on (what consume() receives)."""
    seen, consume = [], session.consume

    def recording(batch, *rest):
        seen.append(list(batch.prompt_texts))
        return consume(batch, *rest)

    session.consume = recording
    try:
        for _ in range(steps):
            session.step()
    finally:
        del session.consume
    return seen


def test_a_change_of_k_on_resume_neither_skips_nor_repeats_a_prompt(tiny_model_dir, tmp_path, caplog):
    config = tiny_config(tiny_model_dir, tmp_path / "a", staleness_threshold=1, rollout_is="token", max_steps=6,
                         save_strategy="no")
    a = Session(load_arguments(None, overrides=config))
    first = trained_prompts(a, 3)
    path = a.save()
    rest = trained_prompts(a, 3)
    assert len({p for step in first + rest for p in step}) == 16  # 6 batches of 4 over 16 prompts: no repeat yet
    for k in (0, 2):
        out = tmp_path / f"k{k}" / "out"
        shutil.copytree(path, out / path.name)
        caplog.clear()
        b = Session.resume(str(out), staleness_threshold=k)
        assert b.pipeline.versions() == [2] and "queue 1 batches" in repr(b)  # batch 3, made by version 3 - 1
        assert "its 1 queued batches are used as they are" in caplog.text
        assert trained_prompts(b, 3) == rest, f"k=1 -> {k}"
        lags = [h.get("async/version_lag/max") for h in b.history[-3:]]
        assert lags[0] == 1  # the queued batch trains one version late, also under k = 0, and says so
        if k == 0:
            assert lags[1:] == [None, None]  # then the synchronous step, logging what it always did
        b.pipeline.close()


def test_a_synchronous_checkpoint_holds_an_empty_queue_and_resumes_asynchronously(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path / "a", max_steps=4, save_strategy="no")
    a = Session(load_arguments(None, overrides=config))
    first = trained_prompts(a, 2)
    path = a.save()
    rest = trained_prompts(a, 2)
    saved = torch.load(path / "state_rollout_queue_0.pt", weights_only=False)
    assert saved["queue"] == [] and saved["produced"] == saved["consumed"] == 2 and "queue" not in repr(a)
    shutil.copytree(path, tmp_path / "b" / "out" / path.name)
    b = Session.resume(str(tmp_path / "b" / "out"), staleness_threshold=1, rollout_is="token")
    assert trained_prompts(b, 2) == rest and first != rest


def test_k_is_capped_at_what_the_run_can_use(tiny_model_dir, tmp_path, caplog):
    config = tiny_config(tiny_model_dir, tmp_path, staleness_threshold=1000, rollout_is="token", max_steps=3,
                         save_strategy="no")
    s = Session(load_arguments(None, overrides=config))
    assert s.pipeline.staleness == 2
    assert "staleness_threshold=1000 is capped at 2: this run has 3 rollout steps" in caplog.text
    s.step()
    assert s.pipeline.produced == 3 and len(s.pipeline.queue) == 2  # batches 0..2, not 1001 of them
    assert [h["async/version_lag/max"] for h in s.history] == [0]


def test_run_ppo_says_once_which_async_keys_have_no_effect_and_caps_k(tiny_model_dir, tmp_path):
    import subprocess
    import sys

    config = write_config(tmp_path, tiny_config(tiny_model_dir, tmp_path, max_steps=3, save_steps=3))
    runs = {
        "idle keys": ["--staleness_threshold", "0", "--async_producer", "thread", "--partial_rollout_token", "3",
                      "--max_steps", "1", "--save_strategy", "no", "--output_dir", str(tmp_path / "idle"), "--tools", "multiply"],
        "cap": ["--staleness_threshold", "1000", "--rollout_is", "token"],
    }
    stderr = {}
    for name, argv in runs.items():
        done = subprocess.run([sys.executable, str(REPO / "run_ppo.py"), config, *argv], cwd=REPO, env=child_env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        stderr[name] = done.stderr
    idle = stderr["idle keys"]
    assert idle.count("async_producer=thread has no effect: staleness_threshold=0 is the synchronous step") == 1
    assert idle.count("partial_rollout_token=3 has no effect: it schedules the weight switch of partial_rollout: "
                      "switch, and partial_rollout is finish") == 1
    assert idle.count("tools has no effect without multi_turn: true") == 1  # the same rule, not only async keys
    assert stderr["cap"].count("staleness_threshold=1000 is capped at 2: this run has 3 rollout steps") == 1
    queue = torch.load(tmp_path / "out" / "checkpoint-3" / "state_rollout_queue_0.pt", weights_only=False)
    assert queue["staleness"] == 2 and len(queue["queue"]) == 2 and queue["produced"] == 5
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["async/version_lag/max"] for r in rows] == [0, 1, 2]
