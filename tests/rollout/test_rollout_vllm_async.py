"""Bounded-staleness training (`staleness_threshold`, issue 37) with the real vLLM engine (marker vllm; the CPU build
in .venv-vllm): the consumed batches lag by at most k versions, vLLM generates every batch with the weights of the
version its tag names (the sync after each update reaches it), k = 0 is the synchronous step to the bit, and a resumed
run continues as the uninterrupted one (the queue and the trainer's torch stream, which vLLM's sampling is reseeded
from, come back from the checkpoint).

The sessions of this module share one vLLM engine (starting one takes most of a minute on 2 cores): each session's
first rollout loads its own actor's weights into it, as the engine's first sync after construction always does.
"""

import copy
import json
import shutil

import pytest
import torch
from vllm_real import SMALL, TINY, needs_vllm

pytestmark = needs_vllm


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from ppokit.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("vllm-tiny") / "model", **TINY)


@pytest.fixture(scope="module")
def shared_engine():
    """{"engine": the first VLLMRolloutEngine built in this module, reused by every later session}."""
    return {}  # the engine this module drops at its end destroys the default group; the next Session copes with it


@pytest.fixture()
def one_engine(monkeypatch, shared_engine):
    from ppokit.rollout import vllm_engine

    real = vllm_engine.VLLMRolloutEngine.from_args.__func__

    def from_args(cls, *args, **overrides):
        if "engine" not in shared_engine:
            shared_engine["engine"] = real(cls, *args, **{**SMALL, **overrides})
        return shared_engine["engine"]

    monkeypatch.setattr(vllm_engine.VLLMRolloutEngine, "from_args", classmethod(from_args))


def session(root, tiny_dir, **overrides):
    from ppokit.args import load_arguments
    from ppokit.rollout import VLLMRolloutEngine
    from ppokit.session import Session

    root.mkdir(parents=True, exist_ok=True)
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(16)))
    (root / "reward.py").write_text("from ppokit.testing import distinct_chars  # noqa: F401\n")
    keys = dict(actor_model_name_or_path=tiny_dir, train_datasets=str(data), rl_algorithm="grpo",
                rollout_engine="vllm", global_batch_size=2, rollout_n=4, global_mini_batch_size=2,
                per_device_train_batch_size=8, max_dec_len=6, max_prompt_len=32, max_length=48, learning_rate=1e-2,
                kl_loss_coeff=0.0, max_steps=3, bf16=True, output_dir=str(root / "out"),
                logging_dir=str(root / "vdl"), report_to=["none"], seed=1, disable_tqdm=True, save_strategy="no",
                reward_functions=f"{root / 'reward.py'}:distinct_chars")  # a key: a resume finds it again
    keys.update(overrides)
    s = Session(load_arguments(None, overrides=keys))
    assert isinstance(s.state.rollout_engine, VLLMRolloutEngine)
    return s


def numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(("timing/", "memory/", "throughput/"))}


def weights(s) -> dict:
    return {k: v.detach().clone() for k, v in s.model.named_parameters()}


def rollout_gap(model, batch) -> float:
    """Mean |vLLM's log-prob - `model`'s| over the batch's response tokens (at the rollout's temperature)."""
    mask = batch.attention_mask
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # left-padded prompts: positions count real tokens only
    with torch.random.fork_rng(), torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=mask, position_ids=positions).logits.float()
    p = batch.prompt_len
    ours = torch.log_softmax(logits[:, p - 1 : -1] / batch.temperature, -1)
    ours = ours.gather(2, batch.input_ids[:, p:, None]).squeeze(2)
    m = batch.response_mask
    return float(((ours - batch.rollout_logprobs).abs() * m).sum() / m.sum())


def test_staleness_one_with_vllm_syncs_every_version_and_resumes_exactly(tmp_path, tiny_dir, one_engine):
    s = session(tmp_path / "a", tiny_dir, staleness_threshold=1, rollout_is="token")
    start = copy.deepcopy(s.model)
    produced = []  # (policy version, gap to the weights of that version, gap to the initial weights)
    real_produce = s._produce  # what step() calls (the pipeline takes it; produce() adds a pull)

    def produce():  # inline producer: the trainer's weights now are the version that generates the batch
        batch = real_produce()
        produced.append((int(batch.policy_version[0]), rollout_gap(s.model, batch), rollout_gap(start, batch)))
        return batch

    s._produce = produce
    first = s.step()
    path = s.save()
    queued = s.pipeline.versions()
    rest = [numbers(s.step()) for _ in range(2)]
    lags = [first["async/version_lag/max"]] + [m["async/version_lag/max"] for m in rest]
    assert lags == [0, 1, 1] and queued == [0]
    assert [v for v, _, _ in produced] == [0, 0, 1, 2]  # batch i from version max(0, i - 1)
    for version, gap, to_start in produced:
        assert gap < 0.05, produced  # bf16 vLLM vs the float32 trainer: vLLM had that version's weights
        if version > 0:  # ... and not the initial ones, which the updates left measurably behind
            assert to_start > 2 * gap + 0.01, produced
    assert all(0 < m["rollout/logprob_diff"] < 0.5 for m in rest)  # one update of lag, corrected by rollout_is

    s.close()
    shutil.copytree(path, tmp_path / "b" / "out" / path.name)
    from ppokit.session import Session

    b = Session.resume(str(tmp_path / "b" / "out"))
    assert b.pipeline.versions() == queued
    again = [numbers(b.step()) for _ in range(2)]
    assert again == rest  # the same batches (vLLM reseeded from the restored stream), weights and metrics
    wa, wb = weights(s), weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_staleness_zero_with_vllm_is_the_synchronous_step_to_the_bit(tmp_path, tiny_dir, one_engine):
    a = session(tmp_path / "a", tiny_dir, max_steps=2)
    got = [numbers(a.step()) for _ in range(2)]
    b = session(tmp_path / "b", tiny_dir, max_steps=2)
    want = [numbers(b.consume(b.produce())) for _ in range(2)]  # the synchronous step by hand
    assert got == want  # also: the same run twice samples the same completions from vLLM
    wa, wb = weights(a), weights(b)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not any(k.startswith("async/") for k in got[0]) and got[0]["rollout/logprob_diff"] < 0.05
