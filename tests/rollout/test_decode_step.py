"""The decoding step over prompt-shared keys/values (rollout/decode_step.py) against the model's own forward over a
cache that copies each prompt's keys to its samples (the path it replaces)."""

import pytest
import torch
import torch.nn.functional as F

import ppokit.rollout.decode as decode_module
import ppokit.rollout.decode_step as step_module
from ppokit.models.loading import autocast_context
from ppokit.rollout.decode import decode, fold_grouped_heads
from ppokit.rollout.decode_step import (
    PromptSharedCache,
    from_prompt_groups,
    shared_attention,
    to_prompt_groups,
)
from ppokit.testing import tiny_causal_lm, tiny_tokenizer

TOK = tiny_tokenizer()
PROMPTS = [TOK(text).input_ids for text in ("a b c", "hello there, how are you", "x")]  # left padding differs
EOS_IDS = list(range(0, len(TOK), 3))  # a third of the vocabulary ends a row: rows finish at different steps


def decoded(model, monkeypatch, shared: bool, **kwargs):
    """decode()'s (tokens, log-probs) through the shared step or the model's forward; counts the shared steps."""
    calls = []
    real = step_module.decoding_step
    monkeypatch.setattr(decode_module, "decoding_step", lambda *a: calls.append(1) or real(*a))
    if not shared:
        monkeypatch.setattr(decode_module, "shared_step_supported", lambda m: False)
    torch.manual_seed(7)
    out = decode(model, PROMPTS, 4, 10, EOS_IDS, TOK.pad_token_id, return_logprobs=True, **kwargs)
    monkeypatch.undo()
    assert bool(calls) == shared
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral"])
def test_shared_step_samples_what_the_models_forward_samples(arch, monkeypatch):
    model = tiny_causal_lm(TOK, arch=arch, seed=2).eval()
    tokens, logprobs = decoded(model, monkeypatch, shared=True)
    plain_tokens, plain_logprobs = decoded(model, monkeypatch, shared=False)
    assert torch.equal(tokens, plain_tokens)
    torch.testing.assert_close(logprobs, plain_logprobs, atol=2e-5, rtol=0)
    lengths = (tokens != TOK.pad_token_id).sum(-1)
    assert lengths.min() < lengths.max()  # rows left the batch at different steps


def test_greedy_shared_step_gives_the_models_greedy_tokens(monkeypatch):
    model = tiny_causal_lm(TOK, arch="llama", seed=4).eval()
    tokens, _ = decoded(model, monkeypatch, shared=True, do_sample=False)
    plain, _ = decoded(model, monkeypatch, shared=False, do_sample=False)
    assert torch.equal(tokens, plain)


def test_bf16_log_probs_agree_with_the_training_forward(monkeypatch):
    """Under CPU bf16 autocast the step's log-probs are those the model's forward gives the same tokens (teacher
    forcing), as closely as the forward-over-copied-cache path's are."""
    model = tiny_causal_lm(TOK, arch="qwen2", seed=5, hidden=128).eval()

    def gap(shared: bool) -> float:
        with torch.no_grad(), autocast_context(torch.bfloat16, torch.device("cpu")):
            tokens, logprobs = decoded(model, monkeypatch, shared=shared)
            worst = 0.0
            for row in range(tokens.shape[0]):
                prompt = PROMPTS[row // 4]
                ids = torch.tensor([prompt + tokens[row].tolist()])
                logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
                forward = logits.log_softmax(-1).gather(1, tokens[row][:, None]).squeeze(1)
                live = tokens[row] != TOK.pad_token_id
                live[int(live.sum()) :] = False
                worst = max(worst, (forward - logprobs[row])[live].abs().max().item())
        return worst

    assert gap(shared=True) < 0.01 and gap(shared=False) < 0.01  # both 0.002 here: bf16 rounding


def test_hooks_on_modules_the_step_skips_keep_the_models_forward(monkeypatch):
    """A hook on a decoder layer (the step calls its parts, not the layer) keeps the model's forward; a hook on a
    part the step calls (the MLP) runs at every step; DeepSpeed's engine hooks on the model itself are let be."""
    model = tiny_causal_lm(TOK, arch="llama", seed=2).eval()
    seen = []
    handle = model.model.layers[1].register_forward_hook(lambda *a: seen.append(1))
    assert not step_module.shared_step_supported(model)
    decoded(model, monkeypatch, shared=False)
    assert len(seen) > 1  # the prefill and the decoding steps ran the hook
    handle.remove()
    seen.clear()
    model.model.layers[1].mlp.register_forward_hook(lambda *a: seen.append(1))
    tokens, _ = decoded(model, monkeypatch, shared=True)
    assert len(seen) == tokens.shape[1]  # the prefill and every decoding step but the last token's

    class DeepSpeedEngine:  # what deepspeed.runtime.engine registers on the module it wraps
        @staticmethod
        def prologue(module, args):
            return None

    model.register_forward_pre_hook(DeepSpeedEngine.prologue)
    assert step_module.shared_step_supported(model)
    model.register_forward_pre_hook(lambda *a: None)
    assert not step_module.shared_step_supported(model)


def test_prompt_groups_round_trip_with_rows_gone():
    keys = [torch.zeros(2, 1, 3, 4)]
    cache = PromptSharedCache(keys, keys, torch.ones(2, 3, dtype=torch.bool), samples=3, max_new_tokens=2)
    rows = torch.arange(6, dtype=torch.float32).view(6, 1, 1, 1).expand(6, 1, 2, 1)  # row r holds r
    grouped = to_prompt_groups(rows, cache)
    assert grouped.shape == (2, 1, 6, 1) and grouped[1, 0, :, 0].tolist() == [3, 3, 4, 4, 5, 5]
    assert torch.equal(from_prompt_groups(grouped, cache, 2), rows)
    cache.select_rows(torch.tensor([0, 2, 5]))
    left = rows[[0, 2, 5]]
    grouped = to_prompt_groups(left, cache)
    assert grouped[0, 0, :, 0].tolist() == [0, 0, 0, 0, 2, 2] and grouped[1, 0, :, 0].tolist() == [0, 0, 0, 0, 5, 5]
    assert torch.equal(from_prompt_groups(grouped, cache, 2), left)


def test_shared_attention_equals_sdpa_over_copied_keys():
    """2 prompts x 3 samples, 4 query heads on 2 key heads, prompt 0 left-padded by 2, 2 generated positions, one
    row gone: the same as SDPA over each row's full key list."""
    torch.manual_seed(0)
    prompts, samples, kv_heads, width, dim, new = 2, 3, 2, 5, 8, 2
    prompt_keys, prompt_values = torch.randn(prompts, kv_heads, width, dim), torch.randn(prompts, kv_heads, width, dim)
    valid = torch.ones(prompts, width, dtype=torch.bool)
    valid[0, :2] = False
    cache = PromptSharedCache([prompt_keys], [prompt_values], valid, samples, max_new_tokens=4)
    own_keys, own_values = torch.randn(6, kv_heads, new, dim), torch.randn(6, kv_heads, new, dim)
    cache.keys[0][:, :, :new], cache.values[0][:, :, :new] = own_keys, own_values
    keep = torch.tensor([0, 1, 3, 4, 5])
    cache.select_rows(keep)
    query = torch.randn(len(keep), 4, 1, dim)
    out = shared_attention(query, cache, 0, new, scaling=0.3)
    owner = keep // samples
    keys = torch.cat([prompt_keys[owner], own_keys[keep]], 2)
    values = torch.cat([prompt_values[owner], own_values[keep]], 2)
    mask = torch.cat([valid[owner], torch.ones(len(keep), new, dtype=torch.bool)], 1)[:, None, None, :]
    q, mask = fold_grouped_heads(query, kv_heads, mask)
    expected = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=0.3)
    torch.testing.assert_close(out, expected.reshape(len(keep), 1, -1), atol=1e-6, rtol=1e-5)


def test_a_cache_in_the_compute_dtype_as_on_cuda_decodes_like_the_models_forward(monkeypatch):
    """On CUDA the cache and the attention are in the compute dtype (bf16), not float32: the shared step's bf16
    attention (products in bf16, autocast off) against the model's forward over the same bf16 cache."""
    monkeypatch.setattr(decode_module, "cache_dtype", lambda model, device: torch.bfloat16)
    model = tiny_causal_lm(TOK, arch="qwen2", seed=3).eval()
    tokens, logprobs = decoded(model, monkeypatch, shared=True, do_sample=False)
    monkeypatch.setattr(decode_module, "cache_dtype", lambda model, device: torch.bfloat16)
    plain, plain_logprobs = decoded(model, monkeypatch, shared=False, do_sample=False)
    assert torch.equal(tokens, plain)
    torch.testing.assert_close(logprobs, plain_logprobs, atol=0.02, rtol=0)
