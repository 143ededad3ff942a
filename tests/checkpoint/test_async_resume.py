"""A resumed asynchronous run (staleness_threshold k > 0) consumes the batches the uninterrupted one would have:
the checkpoint holds the queue of produced, not yet consumed batches (state_rollout_queue_<rank>.pt, a part registered through the checkpoint state protocol), issue 37."""

import shutil

import torch
from checkpoint_helpers import tiny_config

from ppokit.args import load_arguments
from ppokit.session import Session


def numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(("timing/", "memory/", "throughput/"))}


def test_a_resumed_asynchronous_run_continues_exactly(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path / "a", staleness_threshold=1, rollout_is="token", max_steps=4,
                         save_strategy="no")
    a = Session(load_arguments(None, overrides=config))
    for _ in range(2):
        a.step()
    path = a.save()
    assert (path / "state_rollout_queue_0.pt").is_file()
    queued = a.pipeline.versions()
    rest = [numbers(a.step()) for _ in range(2)]
    shutil.copytree(path, tmp_path / "b" / "out" / path.name)  # a's folder stays a's
    b = Session.resume(str(tmp_path / "b" / "out"))
    assert b.global_step == 2 and b.pipeline.versions() == queued == [1]  # batch 2, made by version 2 - 1
    assert "queue 1 batches" in repr(b)
    again = [numbers(b.step()) for _ in range(2)]
    assert again == rest and all(m["async/version_lag/max"] == 1 for m in again)
    wa, wb = dict(a.model.named_parameters()), dict(b.model.named_parameters())
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
