"""ppokit's decoding loop samples from the same distribution as `model.generate`."""

import pytest
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from ppokit.rollout.base import SamplingParams
from ppokit.rollout.decode import (
    KVCache,
    cache_dtype,
    decode,
    float32_attention,
    mask_top_k,
    mask_top_p,
    prompts_per_batch,
    sample_tokens,
    supports_fast_decode,
    worth_compacting,
)
from ppokit.rollout.hf_engine import HFRolloutEngine
from ppokit.testing import tiny_causal_lm, tiny_tokenizer

TOK = tiny_tokenizer()
PROMPTS = [TOK.encode("hello there, how are you?"), TOK.encode("a"), TOK.encode("what is 2+3? answer:")]


@pytest.mark.parametrize("arch,seed", [("llama", 0), ("llama", 1), ("qwen2", 2)])
def test_greedy_equals_generate_greedy(arch, seed):
    model = tiny_causal_lm(TOK, arch=arch, seed=seed, hidden=64, layers=2)
    assert supports_fast_decode(model)
    greedy = SamplingParams(n=3, max_new_tokens=16, temperature=0)
    fast = HFRolloutEngine(model, TOK).generate(PROMPTS, greedy)
    slow = HFRolloutEngine(model, TOK, fast_decode=False).generate(PROMPTS, greedy)
    assert fast.response_ids == slow.response_ids
    assert fast.finish_reasons == slow.finish_reasons
    assert fast.prompt_index == slow.prompt_index == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_first_token_probabilities_match_the_model():
    """The first sampled token of a prompt follows softmax(logits / T) of a plain forward pass."""
    model = tiny_causal_lm(TOK, seed=3)
    prompt = PROMPTS[2]
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([prompt])).logits[0, -1] / 0.5, -1)
    torch.manual_seed(0)
    first = decode(model, [prompt], 4000, 1, [TOK.eos_token_id], TOK.pad_token_id, temperature=0.5)[:, 0]
    freq = torch.bincount(first, minlength=probs.numel()).double() / first.numel()
    assert (freq - probs.double()).abs().max() < 0.03
    assert probs[freq > 0].min() > 0  # nothing drawn outside the support


def test_sample_tokens_is_exact_on_a_small_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, 0.5]]).repeat(20000, 1)
    torch.manual_seed(0)
    drawn = sample_tokens(logits, temperature=1.0, top_k=3, top_p=1.0)
    kept = torch.softmax(torch.tensor([2.0, 1.0, float("-inf"), float("-inf"), 0.5]), -1)
    freq = torch.bincount(drawn, minlength=5).double() / drawn.numel()
    assert freq[2] == 0 and freq[3] == 0
    assert (freq - kept.double()).abs().max() < 0.015


def test_inverse_cdf_equals_the_full_cumulative_sum_and_never_picks_a_zero():
    from ppokit.rollout.decode import CDF_BLOCK, inverse_cdf

    torch.manual_seed(0)
    vocab = 3 * CDF_BLOCK + 17  # padded to whole blocks
    probs = torch.softmax(torch.randn(64, vocab) * 3, -1)
    probs[:, 5 * 17 : 2 * CDF_BLOCK] = 0  # zero tokens, inside and across blocks
    probs[:, -40:] = 0  # and at the end, where rounding past the total would land
    u = torch.rand(64, dtype=torch.float64)
    u[:4] = torch.tensor([0.0, 1 - 1e-16, 0.5, 1e-300], dtype=torch.float64)
    full = probs.double().cumsum(-1)
    expected = torch.searchsorted(full, (u * full[:, -1])[:, None], right=True).squeeze(1)
    got = inverse_cdf(probs, u)
    last = vocab - 41  # the last token with probability
    assert torch.equal(got, expected.clamp_max(last))
    assert (probs.gather(1, got[:, None]) > 0).all()
    hand = torch.tensor([[0.0, 0.25, 0.0, 0.75]])
    picks = [int(inverse_cdf(hand, torch.tensor([v], dtype=torch.float64))) for v in (0.0, 0.2499, 0.25, 0.9999)]
    assert picks == [1, 1, 3, 3]


@pytest.mark.parametrize("top_k,top_p", [(0, 0.9), (5, 1.0), (1, 1.0), (7, 0.5), (0, 0.01)])
def test_top_k_top_p_masks_equal_transformers_warpers(top_k, top_p):
    torch.manual_seed(top_k)
    x = torch.randn(6, 40)
    x[0, :10] = 1.5  # ties at the k-th value
    ours = mask_top_p(mask_top_k(x, top_k), top_p)
    theirs = x.clone()
    if top_k:
        theirs = TopKLogitsWarper(top_k)(None, theirs)
    if top_p < 1:
        theirs = TopPLogitsWarper(top_p)(None, theirs)
    assert torch.equal(torch.isinf(ours), torch.isinf(theirs))
    assert torch.equal(ours[~torch.isinf(ours)], x[~torch.isinf(ours)])


def test_seeded_sampling_reproduces_and_stops_rows_at_eos():
    model = tiny_causal_lm(TOK, seed=4)
    engine = HFRolloutEngine(model, TOK)
    sampling = SamplingParams(n=4, max_new_tokens=24, temperature=1.5, top_p=0.95, seed=7)
    a, b = engine.generate(PROMPTS, sampling), engine.generate(PROMPTS, sampling)
    assert a.response_ids == b.response_ids
    other = engine.generate(PROMPTS, SamplingParams(n=4, max_new_tokens=24, temperature=1.5, top_p=0.95, seed=8))
    assert other.response_ids != a.response_ids
    for ids, reason in zip(a.response_ids, a.finish_reasons):
        assert (reason == "stop") == (ids[-1] == TOK.eos_token_id)
        assert TOK.eos_token_id not in ids[:-1]
        assert len(ids) <= 24


def test_min_new_tokens_and_bf16_autocast():
    model = tiny_causal_lm(TOK, seed=5)
    engine = HFRolloutEngine(model, TOK, dtype=torch.bfloat16)
    out = engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=10, min_new_tokens=6, temperature=1.0, seed=1))
    assert all(len(ids) >= 6 for ids in out.response_ids)
    assert all(TOK.eos_token_id not in ids[:6] for ids in out.response_ids)


def test_kv_cache_writes_in_place_and_selects_rows():
    cache = KVCache(num_layers=1, max_len=5, dtype=torch.float32)
    k = torch.arange(2 * 3, dtype=torch.float32).view(2, 1, 3, 1)
    keys, _ = cache.update(k, k, 0)
    assert keys.shape == (2, 1, 3, 1)
    cache.advance(3)
    cache.select_rows(torch.tensor([1, 1, 0]))
    keys, _ = cache.update(torch.full((3, 1, 1, 1), 9.0), torch.zeros(3, 1, 1, 1), 0)
    assert keys[:, 0, :, 0].tolist() == [[3, 4, 5, 9], [3, 4, 5, 9], [0, 1, 2, 9]]
    assert cache.get_seq_length() == 3


@pytest.mark.parametrize("q_len", [1, 5])
def test_attention_folds_grouped_heads_and_equals_sdpa_with_gqa(q_len):
    torch.manual_seed(0)
    query, key, value = torch.randn(3, 6, q_len, 8), torch.randn(3, 2, 7, 8), torch.randn(3, 2, 7, 8)
    mask = torch.rand(3, 1, q_len, 7) > 0.3
    mask[..., -1] = True  # every query row attends somewhere
    out, _ = float32_attention(None, query, key, value, mask, scaling=0.3)
    ref = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=0.3,
                                                           enable_gqa=True)
    assert out.shape == (3, q_len, 6, 8)
    torch.testing.assert_close(out, ref.transpose(1, 2), rtol=1e-5, atol=1e-5)


def test_cache_dtype_is_the_compute_dtype_off_cpu_and_float32_on_cpu():
    model = tiny_causal_lm(TOK, seed=0).to(torch.bfloat16)
    assert cache_dtype(model, torch.device("cpu")) == torch.float32
    assert cache_dtype(model, torch.device("cuda")) == torch.bfloat16  # no autocast: the weights' dtype
    cache = KVCache(num_layers=1, max_len=4, dtype=torch.bfloat16)
    keys, _ = cache.update(torch.ones(1, 1, 2, 3), torch.ones(1, 1, 2, 3), 0)
    assert keys.dtype == torch.bfloat16


def test_prompts_per_batch_keeps_the_cache_within_the_budget():
    model = tiny_causal_lm(TOK, seed=0)
    c = model.config
    per_row = 2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 10 * 4
    assert prompts_per_batch(c, 9, 2, 10, torch.float32, per_row * 2 * 4) == 4  # 4 prompts x 2 rows fit
    assert prompts_per_batch(c, 9, 2, 10, torch.float32, 1) == 1
    assert prompts_per_batch(c, 3, 2, 10, torch.float32, 1 << 40) == 3


def test_decoding_in_small_batches_gives_the_greedy_answers_of_one_batch():
    model = tiny_causal_lm(TOK, seed=4, hidden=64, layers=2)
    whole = decode(model, PROMPTS, 2, 12, [TOK.eos_token_id], TOK.pad_token_id, do_sample=False)
    split = decode(model, PROMPTS, 2, 12, [TOK.eos_token_id], TOK.pad_token_id, do_sample=False, cache_budget_bytes=1)
    assert torch.equal(whole, split)


def test_finished_rows_leave_a_cpu_bf16_batch_once_a_quarter_finished_and_elsewhere_when_the_padding_drops():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # only the device's type is read: no GPU needed
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert [worth_compacting(left, 32, cpu) for left in (32, 25, 24, 17, 9, 8)] == [False, False, True, True,
                                                                                         True, True]
        assert [worth_compacting(left, 32, cuda) for left in (24, 17, 16, 8)] == [False, False, True, True]
    # float32 products (MKL, rows padded to 16s by skinny_rows): only when the padded count drops
    assert [worth_compacting(left, 32, cpu) for left in (31, 24, 17, 16, 9, 8)] == [False, False, False, True,
                                                                                     True, True]
    assert [worth_compacting(left, 12, cpu) for left in (12, 11, 9)] == [False, False, False]
