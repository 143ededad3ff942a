import pytest
import torch
from torch import nn

from ppokit.rollout import HFRolloutEngine, SamplingParams
from ppokit.testing import tiny_causal_lm, tiny_tokenizer

TOK = tiny_tokenizer()
EOS = TOK.eos_token_id
PAD = TOK.pad_token_id
FAVOURITE = TOK.convert_tokens_to_ids("a")


def scripted_model(eos_logit: float, favourite_logit: float = 5.0):
    """A tiny LM whose next-token distribution is fixed: logits = bias (zero weights)."""
    model = tiny_causal_lm(TOK, seed=0)
    head = nn.Linear(model.config.hidden_size, len(TOK), bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[FAVOURITE] = favourite_logit
        head.bias[EOS] = eos_logit
        head.bias[PAD] = -100.0
    model.config.tie_word_embeddings = False
    model.set_output_embeddings(head)
    return model


PROMPTS = [TOK("hello there").input_ids, TOK("hi").input_ids, TOK("a longer prompt, with padding").input_ids]


def test_greedy_stop_strips_everything_after_eos():
    engine = HFRolloutEngine(scripted_model(eos_logit=50.0), TOK)
    out = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=6))
    assert out.response_ids == [[EOS]] * 3 and out.finish_reasons == ["stop"] * 3
    assert out.num_truncated == 0 and out.logprobs is None


def test_min_new_tokens_holds_eos_back():
    engine = HFRolloutEngine(scripted_model(eos_logit=50.0), TOK)
    out = engine.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_new_tokens=6, min_new_tokens=3))
    assert out.response_ids == [[FAVOURITE, FAVOURITE, FAVOURITE, EOS]]


def test_responses_without_eos_are_flagged_truncated():
    engine = HFRolloutEngine(scripted_model(eos_logit=-50.0), TOK)
    out = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=5))
    assert out.response_ids == [[FAVOURITE] * 5] * 3
    assert out.finish_reasons == ["length"] * 3 and out.num_truncated == 3


def test_sampled_mix_of_stopped_and_truncated_rows_is_consistent():
    engine = HFRolloutEngine(scripted_model(eos_logit=4.0, favourite_logit=4.0), TOK)
    torch.manual_seed(0)
    out = engine.generate(PROMPTS, SamplingParams(n=8, temperature=1.0, max_new_tokens=4))
    assert len(out) == 24 and out.prompt_index == [i for i in range(3) for _ in range(8)]
    for ids, reason in zip(out.response_ids, out.finish_reasons):
        assert PAD not in ids
        if reason == "stop":
            assert ids[-1] == EOS and EOS not in ids[:-1] and len(ids) <= 4
        else:
            assert reason == "length" and len(ids) == 4 and EOS not in ids
    assert 0 < out.num_truncated < 24  # both kinds occur (P(eos) = 1/2 per step)


def test_left_padded_batches_match_one_prompt_at_a_time():
    model = tiny_causal_lm(TOK, seed=3)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8, n=2)
    together = HFRolloutEngine(model, TOK).generate(PROMPTS, greedy)
    alone = HFRolloutEngine(model, TOK, batch_size=1).generate(PROMPTS, greedy)
    assert together.response_ids == alone.response_ids
    assert together.prompt_index == [0, 0, 1, 1, 2, 2]
    for i, prompt in enumerate(PROMPTS):
        single = HFRolloutEngine(model, TOK).generate([prompt], greedy)
        assert single.response_ids == together.response_ids[2 * i : 2 * i + 2]


def test_seeded_sampling_is_reproducible_and_leaves_the_global_rng_alone():
    model = tiny_causal_lm(TOK, seed=4)
    engine = HFRolloutEngine(model, TOK)
    params = SamplingParams(n=4, temperature=1.0, top_p=0.9, top_k=50, max_new_tokens=6, seed=123)
    torch.manual_seed(7)
    first = engine.generate(PROMPTS, params)
    after_first = torch.rand(1)
    torch.manual_seed(7)
    second = engine.generate(PROMPTS, params)
    assert first.response_ids == second.response_ids
    torch.manual_seed(7)
    assert torch.equal(torch.rand(1), after_first)  # the seeded call did not consume the global stream
    other = engine.generate(PROMPTS, SamplingParams(n=4, temperature=1.0, max_new_tokens=6, seed=124))
    assert other.response_ids != first.response_ids
    samples = first.response_ids[:4]
    assert len({tuple(s) for s in samples}) > 1  # the n samples of one prompt differ


def test_unseeded_sampling_follows_the_torch_seed():
    engine = HFRolloutEngine(tiny_causal_lm(TOK, seed=4), TOK)
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6)
    torch.manual_seed(11)
    a = engine.generate(PROMPTS, params)
    torch.manual_seed(11)
    assert engine.generate(PROMPTS, params).response_ids == a.response_ids


def test_training_mode_is_restored_and_training_continues():
    model = tiny_causal_lm(TOK, seed=0).train()
    HFRolloutEngine(model, TOK).generate(PROMPTS[:1], SamplingParams(max_new_tokens=2))
    assert model.training
    ids = torch.tensor([PROMPTS[0]])
    model(input_ids=ids, labels=ids).loss.backward()  # generation left nothing autograd cannot use
    assert model.model.embed_tokens.weight.grad is not None


def test_bf16_autocast_generates_with_the_live_model():
    model = tiny_causal_lm(TOK, seed=5)
    engine = HFRolloutEngine(model, TOK, dtype=torch.bfloat16)
    assert engine.generation_model is model
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    bf16 = engine.generate(PROMPTS, greedy)
    fp32 = HFRolloutEngine(model, TOK).generate(PROMPTS, greedy)
    assert [r[:2] for r in bf16.response_ids] == [r[:2] for r in fp32.response_ids]  # same model, rounded
    assert next(model.parameters()).dtype == torch.float32


def test_bf16_copy_follows_update_weights():
    model = tiny_causal_lm(TOK, seed=5)
    engine = HFRolloutEngine(model, TOK, dtype=torch.bfloat16, copy_weights=True)
    copy = engine.generation_model
    assert copy is not model and next(copy.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)
    stale = copy.model.layers[0].mlp.up_proj.weight.float()
    fresh = model.model.layers[0].mlp.up_proj.weight.to(torch.bfloat16).float()
    assert not torch.equal(stale, fresh)
    engine.update_weights(model)
    for name, p in model.named_parameters():
        torch.testing.assert_close(dict(copy.named_parameters(remove_duplicate=False))[name], p.to(torch.bfloat16))
    out = engine.generate(PROMPTS, SamplingParams(temperature=0.0, max_new_tokens=3))
    assert all(len(r) >= 1 for r in out.response_ids)


def test_generation_config_eos_ids_also_stop():
    model = scripted_model(eos_logit=-50.0)
    with torch.no_grad():
        model.lm_head.bias[FAVOURITE] = 50.0
    model.generation_config.eos_token_id = [EOS, FAVOURITE]  # e.g. SmolLM2's <|im_end|> besides eos
    out = HFRolloutEngine(model, TOK).generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_new_tokens=5))
    assert out.response_ids == [[FAVOURITE]] and out.finish_reasons == ["stop"]


def test_empty_inputs_are_explained():
    engine = HFRolloutEngine(tiny_causal_lm(TOK), TOK)
    with pytest.raises(ValueError, match="no prompts"):
        engine.generate([], SamplingParams())
    with pytest.raises(ValueError, match=r"Prompts \[1\] are empty"):
        engine.generate([[5], []], SamplingParams())


def count_own_copy_casts() -> None:
    """The check of the test below, run in a fresh interpreter: a ZeRO-3 engine built earlier in the same process
    (tests/models) leaves DeepSpeed's own `F.linear` in place, which casts inside its autograd function."""
    engine = HFRolloutEngine(tiny_causal_lm(TOK, seed=6), TOK, dtype=torch.bfloat16)
    engine.use_own_copy()
    weight = engine.generation_model.model.layers[0].mlp.up_proj.weight
    shape = list(weight.shape)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        out = engine.generate([PROMPTS[0]], SamplingParams(n=2, max_new_tokens=8, min_new_tokens=8, temperature=1.0))
    assert len(out.response_ids[0]) == 8
    casts = [e for e in prof.events() if e.name == "aten::_to_copy" and e.input_shapes and e.input_shapes[0] == shape]
    alike = [p for p in engine.generation_model.parameters() if list(p.shape) == shape]  # up and gate, per layer
    assert len(casts) == len(alike) >= 1, (len(casts), len(alike))  # once each (a frozen copy: once each per token)
    assert all(p.grad is None for p in engine.generation_model.parameters())


def test_the_own_copy_casts_each_weight_to_bf16_once_per_generate_call():
    """The asynchronous producer's copy: autocast keeps its bf16 casts only of leaves that require grad, so a frozen
    copy cast every weight again at every decoding step. Counted: the (out, in) casts of one linear over a call of
    8 new tokens, and no gradient is ever made."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parents[1]), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", "import test_rollout_hf as t; t.count_own_copy_casts()"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _grad_modes_seen(model) -> list[bool]:
    """Whether each forward of `model` ran in inference mode (recorded by a forward pre-hook)."""
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(torch.is_inference_mode_enabled()))
    return seen


def test_generation_runs_in_inference_mode_with_the_same_bits(monkeypatch):
    import ppokit.rollout.hf_engine as hf_engine

    sampling = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=5)
    model = tiny_causal_lm(TOK, seed=3)
    seen = _grad_modes_seen(model)
    fast = HFRolloutEngine(model, TOK, dtype=torch.bfloat16, return_logprobs=True).generate(PROMPTS, sampling)
    assert seen and all(seen)
    monkeypatch.setattr(hf_engine, "no_autograd", lambda m: torch.no_grad())
    seen.clear()
    plain = HFRolloutEngine(model, TOK, dtype=torch.bfloat16, return_logprobs=True).generate(PROMPTS, sampling)
    assert seen and not any(seen)
    assert fast.response_ids == plain.response_ids and fast.logprobs == plain.logprobs


def test_a_model_that_writes_buffers_in_forward_generates_under_no_grad_and_trains_after():
    """Dynamic RoPE recomputes `inv_freq` inside forward past its cached length: an inference tensor kept there would
    outlive the generation, so such a model generates under no_grad; training afterwards back-propagates."""
    from transformers import AutoModelForCausalLM

    from ppokit.testing import tiny_model_config

    config = tiny_model_config(TOK)
    config.max_position_embeddings = 16
    config.rope_parameters = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    seen = _grad_modes_seen(model)
    out = HFRolloutEngine(model, TOK).generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_new_tokens=12, seed=1))
    assert seen and not any(seen) and len(out.response_ids) == 6
    ids = torch.tensor([PROMPTS[2] + out.response_ids[4]])
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
