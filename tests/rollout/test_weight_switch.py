"""Partial rollouts on the hf engine (issue 37 item 4): new weights offered while a generation runs are taken
between two tokens; each token records how many switches preceded it, and the tokens (and log-probs) after the
switch come from the new weights. The scripted change makes that visible: the new weights have a zero LM head,
so every token they sample has log-prob ~0, against ~ -log(V) from the near-uniform tiny model."""

import copy
import threading
import time

import pytest
import torch

from ppokit.rollout.base import SamplingParams, WeightSwitch
from ppokit.rollout.hf_engine import HFRolloutEngine
from ppokit.testing import tiny_causal_lm, tiny_tokenizer

TOK = tiny_tokenizer()
PROMPTS = [TOK.encode("hello there"), TOK.encode("a"), TOK.encode("what is 2+3?")]
SAMPLING = SamplingParams(n=3, max_new_tokens=12, temperature=1.0, seed=7)


def sharp_head(model):
    """A copy of `model` whose LM head is 1000 times the old one: it samples its most likely token with
    log-prob ~0, where the tiny random model's near-uniform distribution gives ~ -log(V)."""
    new = copy.deepcopy(model)
    with torch.no_grad():
        new.lm_head.weight.mul_(1000.0)
    return new


def generate_with_offer(model, new_model, switch, delay: float | None, dtype=None):
    """engine.generate in a producer thread; the trainer's thread offers `new_model` (after `delay` seconds, or
    None: never, as a step without a weight sync does)."""
    engine = HFRolloutEngine(model, TOK, return_logprobs=True, dtype=dtype)
    engine.attach_switch(switch)
    result = {}
    switch.begin()

    def produce():
        try:
            result["out"] = engine.generate(PROMPTS, SAMPLING)
        finally:
            switch.end()

    worker = threading.Thread(target=produce)
    worker.start()
    if delay is None:
        switch.release()
    else:
        time.sleep(delay)  # varies the moment of the offer, never asserted
        switch.offer(new_model)
    worker.join()
    return result["out"], engine


@pytest.mark.parametrize("delay,dtype", [(0.0, None), (0.3, None), (0.3, torch.bfloat16)])
def test_a_scheduled_switch_takes_the_new_weights_at_token_s_whenever_they_arrive(delay, dtype):
    """bf16: on a CPU with native bf16 decoding packs its weights once per call; the switch must reach them."""
    model = tiny_causal_lm(TOK, seed=0)
    new = sharp_head(model)
    s = 4
    out, engine = generate_with_offer(model, new, WeightSwitch("switch", at_token=s), delay, dtype)
    plain = HFRolloutEngine(model, TOK, return_logprobs=True, dtype=dtype).generate(PROMPTS, SAMPLING)  # no switch
    assert any(len(ids) > s for ids in out.response_ids)
    for ids, lps, versions, ref_ids in zip(out.response_ids, out.logprobs, out.token_switches, plain.response_ids):
        assert versions == [0] * min(s, len(ids)) + [1] * max(len(ids) - s, 0)  # monotone, switch at s
        assert ids[:s] == ref_ids[:s]  # before the switch: the old weights' tokens, draw for draw
        assert all(lp < -1.0 for lp in lps[:s])
        assert all(lp > -0.1 for lp in lps[s:])  # after it: sampled by (and scored under) the new weights
    # the engine's copy now holds the new weights; a later generation is all new
    assert torch.equal(engine.generation_model.lm_head.weight, new.lm_head.weight)


def test_the_same_scheduled_switch_repeats_to_the_bit():
    model = tiny_causal_lm(TOK, seed=1)
    new = sharp_head(model)
    a, _ = generate_with_offer(model, new, WeightSwitch("switch", at_token=3), 0.0)
    b, _ = generate_with_offer(model, new, WeightSwitch("switch", at_token=3), 0.2)
    assert a.response_ids == b.response_ids and a.logprobs == b.logprobs and a.token_switches == b.token_switches


def test_no_offer_means_no_switch_and_the_plain_answers():
    model = tiny_causal_lm(TOK, seed=2)
    out, _ = generate_with_offer(model, sharp_head(model), WeightSwitch("switch", at_token=2), None)
    plain = HFRolloutEngine(model, TOK, return_logprobs=True).generate(PROMPTS, SAMPLING)
    assert out.response_ids == plain.response_ids and out.logprobs == plain.logprobs
    assert all(v == [0] * len(v) for v in out.token_switches)


def test_a_timed_switch_is_recorded_monotone_and_finish_never_switches():
    model = tiny_causal_lm(TOK, seed=3)
    new = sharp_head(model)
    out, _ = generate_with_offer(model, new, WeightSwitch("switch"), 0.0)  # wherever the offer lands
    for lps, versions in zip(out.logprobs, out.token_switches):
        assert versions == sorted(versions) and set(versions) <= {0, 1}
        assert all((lp > -0.1) == (v == 1) for lp, v in zip(lps, versions))
    switch = WeightSwitch("finish")
    out, engine = generate_with_offer(model, new, switch, 0.0)
    assert out.token_switches is None  # finish: no per-token versions
    plain = HFRolloutEngine(model, TOK, return_logprobs=True).generate(PROMPTS, SAMPLING)
    assert out.response_ids == plain.response_ids and out.logprobs == plain.logprobs  # finished on the old weights
    assert 0 <= switch.rows_on_old <= len(out.response_ids)
    assert torch.equal(engine.generation_model.lm_head.weight, new.lm_head.weight)  # applied once it ended


def test_bad_switch_settings_are_sentences():
    with pytest.raises(ValueError, match="finish or switch"):
        WeightSwitch("later")
    with pytest.raises(ValueError, match=">= 1"):
        WeightSwitch("switch", at_token=0)
