"""The vLLM engine on a real vLLM (the CPU build in .venv-vllm, or a GPU build): generation, log-probs, weight sync."""

import pytest
import torch
from vllm_real import SMALL, TINY, device, needs_vllm, trainer_logprobs, vllm_sequence_logprobs

from ppokit.rollout import SamplingParams

pytestmark = needs_vllm


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from ppokit.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("vllm-tiny") / "model", **TINY)


@pytest.fixture(scope="module")
def setup(tiny_dir):
    """(model, tokenizer, engine): the actor in float32 and its vLLM engine in bf16, built once."""
    from ppokit.args import load_arguments
    from ppokit.models import load_causal_lm, load_tokenizer
    from ppokit.rollout import make_rollout_engine

    tok = load_tokenizer(tiny_dir)
    model = load_causal_lm(tiny_dir, device=device())
    args = load_arguments(None, overrides=dict(max_prompt_len=32, max_dec_len=16, max_length=48, seed=0))
    engine = make_rollout_engine("vllm", True, model, tok, model_path=tiny_dir, args=args,
                                 compute_dtype=torch.bfloat16, **SMALL)
    return model, tok, engine


def test_generates_from_token_ids_and_reproduces_a_seed(setup):
    model, tok, engine = setup
    prompts = [tok("hello").input_ids, tok("hi there").input_ids]
    sampling = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=1)
    out = engine.generate(prompts, sampling)
    assert out.prompt_index == [0, 0, 0, 1, 1, 1] and len(out.response_ids) == 6
    for ids, reason in zip(out.response_ids, out.finish_reasons):
        assert (reason == "length") == (len(ids) == 8 and tok.eos_token_id not in ids)
    assert len({tuple(ids) for ids in out.response_ids[:3]}) > 1  # the samples of one prompt differ
    again = engine.generate(prompts, sampling)
    assert again.response_ids == out.response_ids and again.logprobs == out.logprobs
    other = engine.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=2))
    assert other.response_ids != out.response_ids
    assert [len(lp) for lp in out.logprobs] == [len(ids) for ids in out.response_ids]


def test_training_calls_reseed_the_engine_from_the_trainers_stream(setup):
    """Unseeded (training) calls carry no per-request seeds: vLLM samples them from its one generator, reseeded from
    a draw of the trainer's torch stream. The same stream gives the same tokens (a rerun; a resume restores it), the
    next call others, the samples of one prompt differ, and the trainer's stream moves by that one draw only."""
    model, tok, engine = setup
    prompts = [tok("hello").input_ids, tok("once upon a").input_ids]
    sampling = SamplingParams(n=4, temperature=1.0, max_new_tokens=8)
    torch.manual_seed(5)
    first = engine.generate(prompts, sampling)
    after = torch.get_rng_state()
    nxt = engine.generate(prompts, sampling)
    torch.manual_seed(5)
    engine.generate([tok("something else").input_ids], SamplingParams(n=2, temperature=1.0, max_new_tokens=3,
                                                                      seed=9))  # a seeded call draws nothing
    again = engine.generate(prompts, sampling)
    assert again.response_ids == first.response_ids and again.logprobs == first.logprobs
    assert nxt.response_ids != first.response_ids
    assert len({tuple(ids) for ids in first.response_ids[:4]}) > 1 and len({tuple(ids) for ids in
                                                                          first.response_ids[4:]}) > 1
    torch.manual_seed(5)
    torch.randint(2**62, (1,))
    assert torch.equal(torch.get_rng_state(), after)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_processed_logprobs_match_the_trainers(setup, temperature):
    model, tok, engine = setup
    prompt = tok("what is 2+3?").input_ids
    out = engine.generate([prompt], SamplingParams(n=4, temperature=temperature, max_new_tokens=12, seed=3))
    diffs = []
    for ids, lps in zip(out.response_ids, out.logprobs):
        ours = trainer_logprobs(model, prompt, ids, temperature)
        diffs.append((torch.tensor(lps) - ours).abs())
    diffs = torch.cat(diffs)
    assert diffs.mean() < 0.03 and diffs.max() < 0.2  # bf16 engine vs float32 trainer
    # at another temperature the log-probs would be far off: the engine's are the processed ones
    hot = trainer_logprobs(model, prompt, out.response_ids[0], temperature + 0.5)
    assert (torch.tensor(out.logprobs[0]) - hot).abs().mean() > 3 * diffs.mean()


def test_rollout_is_weights_on_the_real_mismatch(setup):
    from ppokit.algos.rollout_correction import logprob_mismatch, truncated_is_weights

    model, tok, engine = setup
    prompts = [tok("count: 1 2 3").input_ids, tok("abc").input_ids]
    out = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=10, seed=4))
    width = max(map(len, out.response_ids))
    rollout = torch.zeros(len(out.response_ids), width)
    trainer = torch.zeros_like(rollout)
    mask = torch.zeros_like(rollout)
    for i, (ids, lps) in enumerate(zip(out.response_ids, out.logprobs)):
        rollout[i, : len(ids)] = torch.tensor(lps)
        trainer[i, : len(ids)] = trainer_logprobs(model, prompts[out.prompt_index[i]], ids, 1.0)
        mask[i, : len(ids)] = 1
    diff = logprob_mismatch(trainer, rollout, mask)
    assert 0 < float(diff["logprob_diff"]) < 0.05
    weights, metrics = truncated_is_weights(trainer, rollout, mask, "token", 2.0)
    w = weights[mask.bool()]
    assert (w != 1).any() and ((w - 1).abs() < 0.2).all() and bool(torch.isfinite(w).all())
    torch.testing.assert_close(w, torch.exp(trainer - rollout)[mask.bool()].clamp(max=2.0))


def test_weight_sync_after_an_optimizer_step(setup):
    model, tok, engine = setup
    prompt, response = tok("the cat sat").input_ids, tok(" on the mat").input_ids
    engine.generate([prompt], SamplingParams(n=1, temperature=1.0, max_new_tokens=2, seed=0))  # synced, awake
    before = vllm_sequence_logprobs(engine, prompt, response)
    torch.testing.assert_close(before, trainer_logprobs(model, prompt, response, 1.0), atol=0.1, rtol=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    ids = torch.tensor([prompt + response], device=next(model.parameters()).device)
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    engine.update_weights(model)
    engine.generate([prompt], SamplingParams(n=1, temperature=1.0, max_new_tokens=2, seed=0))  # loads the weights
    after = vllm_sequence_logprobs(engine, prompt, response)
    trained = trainer_logprobs(model, prompt, response, 1.0)
    assert (after - before).abs().mean() > 0.1  # the step moved the sequence's log-probs, and vLLM saw it
    torch.testing.assert_close(after, trained, atol=0.1, rtol=0)


def test_lora_weight_sync_sends_the_merged_weights(tiny_dir):
    from ppokit.args import load_arguments
    from ppokit.models import LoraSpec, apply_lora, load_causal_lm, load_tokenizer
    from ppokit.rollout import make_rollout_engine

    tok = load_tokenizer(tiny_dir)
    model = apply_lora(load_causal_lm(tiny_dir, device=device()), LoraSpec(rank=4, alpha=8))
    args = load_arguments(None, overrides=dict(max_prompt_len=32, max_dec_len=16, max_length=48, seed=0))
    engine = make_rollout_engine("vllm", True, model, tok, model_path=tiny_dir, args=args,
                                 compute_dtype=torch.bfloat16, **SMALL)
    prompt, response = tok("the dog ran").input_ids, tok(" far away").input_ids
    engine.generate([prompt], SamplingParams(n=1, temperature=1.0, max_new_tokens=2, seed=0))
    before = vllm_sequence_logprobs(engine, prompt, response)
    with torch.no_grad():  # a trained adapter: B != 0
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    engine.update_weights(model)
    engine.generate([prompt], SamplingParams(n=1, temperature=1.0, max_new_tokens=2, seed=0))
    after = vllm_sequence_logprobs(engine, prompt, response)
    with torch.no_grad():
        ids = torch.tensor([prompt + response], device=next(model.parameters()).device)
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    merged = torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt):, None]).squeeze(1).cpu()
    assert (after - before).abs().mean() > 0.1
    torch.testing.assert_close(after, merged, atol=0.1, rtol=0)
