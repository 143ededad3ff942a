"""Asynchronous rollouts under DeepSpeed ZeRO stages 1, 2 and 3 (one process, DeepSpeed's CPU accelerator), issue 37:
k = 0 is the synchronous step (produce, then consume) to the bit; k = 1 follows the fixed schedule (batch i from
version i - 1), its first update is k = 0's first update to the bit (batch 0 is the same batch, version 0), and a
save/resume in the middle continues exactly, the queue included."""

import pytest
import torch
from test_async_pipeline import numbers, tiny_session

from ppokit.checkpoint import resume_into
from ppokit.models.weights import gathered
from ppokit.session import Session

# ZeRO-2 in the default suite (~20-40 s each on 2 shared cores); stages 1 and 3 under `make test-slow`
STAGES = [pytest.param("stage1", id="zero1", marks=pytest.mark.slow), pytest.param("stage2", id="zero2"),
          pytest.param("stage3", id="zero3", marks=pytest.mark.slow)]


def weights(s: Session) -> dict:
    with gathered(s.model):  # ZeRO-3: the whole parameters, not this process's partitions
        return {k: v.detach().clone() for k, v in s.model.named_parameters()}


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])][:3]


@pytest.mark.parametrize("sharding", STAGES)
def test_staleness_zero_is_the_synchronous_step_under_zero(tmp_path, sharding):
    a = tiny_session(tmp_path / "a", sharding=sharding)
    stepped = [numbers(a.step()) for _ in range(2)]
    b = tiny_session(tmp_path / "b", sharding=sharding)
    by_hand = [numbers(b.consume(b.produce())) for _ in range(2)]
    assert stepped == by_hand and not any(k.startswith("async/") for k in stepped[0])
    assert_same_weights(weights(a), weights(b))
    assert stepped[1]["actor/grad_norm"] > 0


@pytest.mark.parametrize("sharding", STAGES)
def test_staleness_one_under_zero_follows_the_schedule_and_resumes_exactly(tmp_path, sharding):
    sync = tiny_session(tmp_path / "sync", sharding=sharding, rollout_is="token")
    first_sync = numbers(sync.step())
    after_sync = weights(sync)
    keys = dict(sharding=sharding, staleness_threshold=1, rollout_is="token")
    s = tiny_session(tmp_path / "s", **keys)
    first = numbers(s.step())
    # batch 0 from version 0 in both: the same update, whatever else the queue holds
    assert {k: v for k, v in first.items() if not k.startswith("async/")} == first_sync
    assert_same_weights(after_sync, weights(s))
    second = numbers(s.step())
    assert (s.last_batch.policy_version == 0).all() and second["async/version_lag/max"] == 1
    path = s.save()
    assert (path / "state_rollout_queue_0.pt").is_file() and s.pipeline.versions() == [1]
    third = numbers(s.step())
    assert (s.last_batch.policy_version == 1).all() and third["async/version_lag"] == 1
    expected = weights(s)
    s.close()
    r = tiny_session(tmp_path / "s", **keys)  # the same run (its reward functions are Python callables)
    resume_into(r, str(path))
    assert r.pipeline.versions() == [1] and r.global_step == 2
    assert numbers(r.step()) == third
    assert_same_weights(expected, weights(r))
