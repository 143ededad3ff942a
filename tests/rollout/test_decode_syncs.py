"""The decoding loop waits for the device at most once per token, and its KV-cache budget follows the device
(issue 35 item 5). On a CPU nothing waits, so the waits are counted where a GPU would have them: every aten op
that hands a device value to the host (`_local_scalar_dense`: `.item()`, `int()`, `bool()`, Python `if`) or
whose output size depends on device values (`nonzero`, `masked_select`, indexing with a boolean mask)."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ppokit.rollout import decode as decode_module
from ppokit.rollout.decode import decode, kv_cache_budget, prompts_per_batch
from ppokit.testing import tiny_causal_lm, tiny_tokenizer

TOK = tiny_tokenizer()
SYNCING = {"_local_scalar_dense", "nonzero", "masked_select", "unique_consecutive", "_unique2", "equal"}


class HostSyncs(TorchDispatchMode):
    """Counts the ops that would make the host wait for a CUDA device."""

    def __init__(self):
        super().__init__()
        self.count, self.names = 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        boolean_index = name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ()) if i is not None)
        if name in SYNCING or boolean_index:
            self.count += 1
            self.names.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("do_sample,n,top_p", [(True, 6, 0.9), (False, 2, 1.0)])
def test_the_decoding_loop_syncs_at_most_once_per_token(do_sample, n, top_p):
    model = tiny_causal_lm(TOK, seed=0)
    prompts = [TOK.encode("hello there"), TOK.encode("a"), TOK.encode("say a b c"), TOK.encode("xyz")]
    eos = [TOK.eos_token_id, 7, 9, 11]  # frequent stops: rows finish and leave the batch along the way
    if not do_sample:  # greedy repeats itself: stop on the third token the first prompt gives
        eos.append(int(decode(model, prompts, 1, 3, eos, TOK.pad_token_id, do_sample=False)[0, -1]))
    torch.manual_seed(0)
    with HostSyncs() as syncs:
        tokens, _ = decode(model, prompts, n, 40, eos, TOK.pad_token_id, do_sample=do_sample, top_p=top_p,
                           return_logprobs=True)
    steps = tokens.shape[1]
    assert (tokens == TOK.pad_token_id).any()  # some rows stopped early, so rows left the batch
    assert syncs.count <= steps + 4, (syncs.count, steps, sorted(set(syncs.names)))


def test_the_kv_budget_is_a_share_of_free_cuda_memory_and_two_gib_on_cpu(monkeypatch):
    asked = []

    def mem_get_info(device=None):
        asked.append(device)
        return 6 << 30, 80 << 30  # 6 GiB free of 80

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    cuda = torch.device("cuda", 0)
    assert kv_cache_budget(cuda) == int((6 << 30) * decode_module.CUDA_FREE_FRACTION) and asked == [cuda]
    assert kv_cache_budget(torch.device("cpu")) == 2 << 30 and len(asked) == 1
    # the split that follows: a (1024-layer-position) row of this config, 8 samples per prompt
    config = tiny_causal_lm(TOK, seed=0).config
    per_row = (2 * config.num_hidden_layers * config.num_key_value_heads
               * (config.hidden_size // config.num_attention_heads) * 1024 * 2)  # bf16 cache on the GPU
    prompts = prompts_per_batch(config, 100_000, 8, 1024, torch.bfloat16, kv_cache_budget(cuda))
    assert prompts == int((6 << 30) * decode_module.CUDA_FREE_FRACTION) // (per_row * 8)
    assert prompts_per_batch(config, 100_000, 8, 1024, torch.bfloat16, kv_cache_budget(torch.device("cpu"))) == \
        (2 << 30) // (per_row * 8)


def test_decode_asks_the_device_for_its_budget_and_splits_by_it(monkeypatch):
    """decode() without an explicit budget takes `kv_cache_budget` of the model's device; a budget of one
    prompt's cache splits the prompts one per batch, with the answers of one batch."""
    model = tiny_causal_lm(TOK, seed=4)
    prompts = [TOK.encode("hello there"), TOK.encode("a"), TOK.encode("what is 2+3?")]
    whole = decode(model, prompts, 2, 8, [TOK.eos_token_id], TOK.pad_token_id, do_sample=False)
    seen, batches = [], []
    monkeypatch.setattr(decode_module, "kv_cache_budget", lambda device: seen.append(device) or 1)
    real = decode_module._decode_batch
    monkeypatch.setattr(decode_module, "_decode_batch", lambda m, p, *a: batches.append(len(p)) or real(m, p, *a))
    split = decode(model, prompts, 2, 8, [TOK.eos_token_id], TOK.pad_token_id, do_sample=False)
    assert seen == [torch.device("cpu")] and batches == [1, 1, 1]
    assert torch.equal(whole, split)
