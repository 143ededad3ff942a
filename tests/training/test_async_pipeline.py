"""Bounded-staleness rollouts (issue 37): k = 0 is the synchronous step to the bit, no consumed batch is older than
k policy versions (the rows' version tags say so). The resume is tests/checkpoint/test_async_resume.py."""

import json
from pathlib import Path

import torch

from ppokit.args import load_arguments
from ppokit.session import Session
from ppokit.testing import letter_a, save_tiny_model


def tiny_session(root: Path, **overrides) -> Session:
    model = root.parent / "model"
    if not model.exists():
        save_tiny_model(model, seed=0)
    data = root.parent / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(16)))
    args = dict(actor_model_name_or_path=str(model), train_datasets=str(data), global_batch_size=4, rollout_n=2,
                global_mini_batch_size=4, per_device_train_batch_size=4, max_dec_len=6, max_prompt_len=32,
                max_length=64, learning_rate=1e-3, max_steps=6, output_dir=str(root / "out"),
                logging_dir=str(root / "vdl"), report_to=["none"], seed=1, disable_tqdm=True, save_strategy="no",
                rl_algorithm="grpo", kl_loss_coeff=0.0)
    args.update(overrides)
    return Session(load_arguments(None, overrides=args), reward_functions=[letter_a, varied])


def varied(prompts, responses, **kw):
    """A reward that differs within groups, so the updates move the weights."""
    return [float(sum(map(ord, r)) % 5) for r in responses]


def numbers(metrics: dict) -> dict:
    """The metrics that repeat to the bit (not times, memory, nor the rows a producer thread happened to have
    running when the update's weights were ready: async/rows_finished_on_old)."""
    return {k: v for k, v in metrics.items() if not k.startswith(("timing/", "memory/", "throughput/"))
            and k != "async/rows_finished_on_old"}


def weights(s: Session) -> dict:
    return {k: v.detach().clone() for k, v in s.model.named_parameters()}


def test_staleness_zero_is_the_synchronous_step_to_the_bit(tmp_path):
    a = tiny_session(tmp_path / "a")
    got = [numbers(a.step()) for _ in range(2)]
    b = tiny_session(tmp_path / "b")
    want = []
    for _ in range(2):  # the synchronous step by hand: produce, then consume
        want.append(numbers(b.consume(b.produce())))
    assert got == want
    wa, wb = weights(a), weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(g["advantages/abs_mean"] > 0 for g in got)  # the steps did learn something
    assert not any(k.startswith("async/") for k in got[0])


def test_no_consumed_batch_is_older_than_k_versions(tmp_path):
    k = 2
    s = tiny_session(tmp_path / "s", staleness_threshold=k, rollout_is="token")
    lags = []
    for i in range(4):
        version = s.state.updates_done
        metrics = s.step()
        tags = s.last_batch.policy_version
        assert (tags == max(0, i - k)).all()  # the fixed schedule: batch i from version i - k
        lags.append(version - int(tags.max()))
        assert metrics["async/version_lag/max"] == min(i, k) and metrics["async/version_lag"] == min(i, k)
        assert "rollout/is_weight_mean" in metrics or any(m.startswith("rollout/is") for m in metrics)
    assert lags == [0, 1, 2, 2] and max(lags) <= k
    assert "queue 2 batches" in repr(s) and "staleness_threshold=2" in repr(s)



def test_the_drift_watch_warns_once_with_numbers_when_the_logprob_diff_keeps_rising(caplog):
    from ppokit.training.pipeline import DriftWatch

    watch = DriftWatch(window=4, factor=2.0)
    flat = [watch.see(s, {"rollout/logprob_diff": 0.01}) for s in range(6)]
    assert flat == [None] * 6
    rising = [watch.see(6 + s, {"rollout/logprob_diff": v}) for s, v in enumerate([0.01, 0.015, 0.02, 0.03])]
    assert rising[:3] == [None] * 3 and "from 0.01 to 0.03 at step 9" in rising[3]
    assert watch.see(10, {"rollout/logprob_diff": 0.09}) is None  # once
    assert sum("drift" in r.message for r in caplog.records) == 1


