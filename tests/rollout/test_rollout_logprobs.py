"""The hf engine's per-token log-probs: exact on a scripted model, and equal to the trainer's recomputation."""

import math

import torch
from torch import nn

from ppokit.rollout import HFRolloutEngine, SamplingParams
from ppokit.testing import tiny_causal_lm, tiny_tokenizer

TOK = tiny_tokenizer()
EOS, PAD = TOK.eos_token_id, TOK.pad_token_id
A = TOK.convert_tokens_to_ids("a")


def scripted_model(bias: dict[int, float]):
    """A tiny LM whose next-token logits are a fixed bias (zero weights) whatever the context."""
    model = tiny_causal_lm(TOK, seed=0)
    head = nn.Linear(model.config.hidden_size, len(TOK), bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-1e4)
        for token, logit in bias.items():
            head.bias[token] = logit
    model.config.tie_word_embeddings = False
    model.set_output_embeddings(head)
    return model


def test_greedy_logprobs_are_the_scripted_distribution():
    # two live tokens: logits a=2, eos=0 -> p(a) = e^2/(e^2+1); greedy always picks a (no eos), 3 tokens
    engine = HFRolloutEngine(scripted_model({A: 2.0, EOS: 0.0}), TOK, return_logprobs=True)
    out = engine.generate([TOK("hi").input_ids], SamplingParams(temperature=0.0, max_new_tokens=3, n=2))
    expected = math.log(math.e**2 / (math.e**2 + 1))
    assert out.response_ids == [[A, A, A]] * 2
    for row in out.logprobs:
        assert len(row) == 3 and all(math.isclose(v, expected, rel_tol=1e-5) for v in row)


def test_sampled_logprobs_use_the_temperature_and_stop_at_eos():
    # logits a=1, eos=1 at temperature 0.5 -> both have p = 1/2 whatever is sampled
    engine = HFRolloutEngine(scripted_model({A: 1.0, EOS: 1.0}), TOK, return_logprobs=True)
    out = engine.generate([TOK("hi").input_ids] * 3, SamplingParams(temperature=0.5, max_new_tokens=6, n=4, seed=0))
    assert len(out.logprobs) == 12
    for ids, row in zip(out.response_ids, out.logprobs):
        assert len(row) == len(ids)  # one per kept token, EOS included, nothing past it
        assert all(math.isclose(v, math.log(0.5), rel_tol=1e-5) for v in row)


def test_logprobs_are_off_by_default():
    engine = HFRolloutEngine(scripted_model({A: 1.0, EOS: 1.0}), TOK)
    assert engine.generate([TOK("hi").input_ids], SamplingParams(temperature=1.0, max_new_tokens=3)).logprobs is None


def test_rollout_logprobs_match_the_trainers_recomputation():
    from ppokit.training.batch import build_batch
    from ppokit.training.forward import batched_logprobs

    model = tiny_causal_lm(TOK, seed=3).eval()
    engine = HFRolloutEngine(model, TOK, return_logprobs=True)
    prompts = [TOK("hello there").input_ids, TOK("a longer prompt, with padding").input_ids]
    out = engine.generate(prompts, SamplingParams(temperature=0.7, max_new_tokens=8, n=2, seed=1))
    records = [{"src": ["x"]}, {"src": ["y"]}]
    batch = build_batch(records, prompts, ["x", "y"], out.prompt_index, out.response_ids, out.finish_reasons, TOK,
                        rollout_logprobs=out.logprobs)
    trainer = batched_logprobs(model, batch, 4, 1024, torch.float32, torch.device("cpu"), 0.7)
    mask = batch.response_mask
    assert mask.sum() > 4
    diff = ((trainer - batch.rollout_logprobs).abs() * mask).max()
    assert float(diff) < 1e-4, float(diff)  # same weights, same precision: only KV-cache rounding differs
