import logging

import pytest
import torch

import ppokit.rollout as rollout
from ppokit.rollout import (
    HFRolloutEngine,
    RolloutOutput,
    SamplingParams,
    make_rollout_engine,
    vllm_available,
    vllm_sampling_kwargs,
)
from ppokit.testing import tiny_causal_lm, tiny_tokenizer


def test_temperature_zero_means_greedy():
    assert SamplingParams(temperature=0.0).do_sample is False
    assert SamplingParams(temperature=0.7).do_sample is True
    assert SamplingParams(temperature=0.7, do_sample=False).do_sample is False


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n=0), "n \\(rollout_n\\) must be >= 1"),
        (dict(max_new_tokens=0), "max_dec_len"),
        (dict(max_new_tokens=4, min_new_tokens=5), "min_dec_len"),
        (dict(temperature=0.0, do_sample=True), "temperature must be > 0"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
    ],
)
def test_invalid_sampling_is_explained(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_output_counts_truncated_rows():
    out = RolloutOutput([0, 0, 1], [[1, 2], [3], [4]], ["stop", "length", "length"])
    assert out.num_truncated == 2 and len(out) == 3


def test_vllm_sampling_maps_one_to_one():
    s = SamplingParams(n=4, max_new_tokens=64, min_new_tokens=2, temperature=0.8, top_p=0.9, top_k=20,
                       repetition_penalty=1.1, seed=3)
    kw = vllm_sampling_kwargs(s, [2, 0])
    assert kw == dict(n=4, max_tokens=64, min_tokens=2, temperature=0.8, top_p=0.9, top_k=20,
                      repetition_penalty=1.1, stop_token_ids=[2, 0], skip_special_tokens=False, detokenize=False)
    greedy = vllm_sampling_kwargs(SamplingParams(temperature=0.0, top_p=0.5, top_k=5), [2], logprobs=True)
    assert (greedy["temperature"], greedy["top_p"], greedy["top_k"], greedy["logprobs"]) == (0.0, 1.0, -1, 0)
    assert vllm_sampling_kwargs(SamplingParams(top_k=0), [2])["top_k"] == -1  # off


@pytest.mark.skipif(vllm_available(), reason="vLLM is installed: the fallback is not taken")
def test_fusemt_without_vllm_falls_back_to_hf_once(caplog, monkeypatch):
    monkeypatch.setattr(rollout, "_noted", set())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # on a GPU machine the fast path is asked for
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok)
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        first = make_rollout_engine(None, True, model, tok, model_path="unused")
        second = make_rollout_engine(None, True, model, tok, model_path="unused")
    assert isinstance(first, HFRolloutEngine) and isinstance(second, HFRolloutEngine)
    notes = [r.getMessage() for r in caplog.records]
    assert notes == ["use_fusemt asked for the fast path but vLLM is not installed; using the hf engine"]


def test_fusemt_on_a_cpu_asks_for_no_fast_path(caplog, monkeypatch):
    monkeypatch.setattr(rollout, "_noted", set())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    tok = tiny_tokenizer()
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        engine = make_rollout_engine(None, True, tiny_causal_lm(tok), tok, model_path="unused")
    assert isinstance(engine, HFRolloutEngine) and not caplog.records  # the default config stays quiet on a CPU


def test_hf_engine_choice_and_generation_dtype(caplog):
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok)
    with caplog.at_level(logging.WARNING, logger="ppokit"):
        plain = make_rollout_engine("hf", True, model, tok)
        bf16 = make_rollout_engine("hf", False, model, tok, batch_size=2, compute_dtype=torch.bfloat16)
    assert not caplog.records
    assert plain.generation_model is model and plain.dtype is None
    assert bf16.generation_model is model and bf16.dtype == torch.bfloat16 and bf16.batch_size == 2
    with pytest.raises(ValueError, match="choose 'hf' or 'vllm'"):
        make_rollout_engine("fusemt", True, model, tok)
