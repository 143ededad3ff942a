"""ppokit's own decoding loop for decoder-only transformers models (Llama, Qwen2, Mistral ...).

What it does that `model.generate` does not (each measured in docs/performance.md):
- prefill once per prompt, whose keys/values its n samples share: kept once per prompt and read once per
  decoding step for all of them (`decode_step.PromptSharedCache`, `shared_attention`: on a CPU that attention is
  bandwidth-bound, +14 % generated tokens/s on the bench's rollouts), each row's own generated keys/values
  preallocated for max_new_tokens and written in place (no `cat` per step); models `decode_step` cannot run
  (unusual layouts, forward hooks) copy the prompt's keys/values to each sample and decode through their forward;
- attention in the compute dtype (float32 on CPU: a bf16 single-query attention is slow there), grouped-query
  heads folded into the query length (for SDPA: no `enable_gqa`, which with a mask forces its math kernel);
- exact sampling with one uniform number per row: inverse CDF over the (top-k / top-p masked)
  softmax instead of `torch.multinomial`, which draws an exponential per vocabulary entry;
- rows that finished are dropped from the batch (their cache rows too), and the loop stops when
  the last row finishes;
- one host sync per generated token (the count of rows still running), where writing the tokens through boolean
  masks and `nonzero` made about five (tests/rollout/test_decode_syncs.py counts them: 201 -> 40 for 40 tokens);
- the KV-cache budget of a decoding batch follows the device: half the free CUDA memory (`kv_cache_budget`),
  2 GiB on a CPU.
The sampling semantics are those of `generate`: temperature, then top-k, then top-p (keeping at
least one token), min_new_tokens suppresses EOS. Repetition penalty is left to `generate`.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ppokit.models.loading import KNOWN_DECODER_TYPES
from ppokit.rollout.decode_linears import decoding_linears, skinny_rows
from ppokit.rollout.decode_step import PromptSharedCache, decoding_step, shared_step_supported

ATTENTION = "ppokit_decode"


class KVCache:
    """Keys/values of every layer, preallocated as (B, H_kv, max_len, D) in `dtype`, filled in place.

    Duck-types the part of transformers' `Cache` that the supported models call during a forward:
    `update(keys, values, layer_idx)` returns the keys/values of all positions so far, and
    `get_seq_length()`. `advance(q)` moves the write position after a forward of q positions.
    """

    def __init__(self, num_layers: int, max_len: int, dtype: torch.dtype):
        self.max_len = max_len
        self.dtype = dtype
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        if self.keys[layer_idx] is None:
            b, h, _, d = key_states.shape
            self.keys[layer_idx] = key_states.new_zeros((b, h, self.max_len, d), dtype=self.dtype)
            self.values[layer_idx] = value_states.new_zeros((b, h, self.max_len, value_states.shape[-1]),
                                                            dtype=self.dtype)
        end = self.length + key_states.shape[2]
        self.keys[layer_idx][:, :, self.length : end] = key_states
        self.values[layer_idx][:, :, self.length : end] = value_states
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def advance(self, positions: int) -> None:
        self.length += positions

    def select_rows(self, index: torch.Tensor) -> None:
        """Keep only the batch rows `index` (repeats allowed: copies a row to several samples)."""
        self.keys = [k.index_select(0, index) if k is not None else None for k in self.keys]
        self.values = [v.index_select(0, index) if v is not None else None for v in self.values]


def float32_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """SDPA in the cache's dtype (float32 on CPU: `cache_dtype`), outside autocast, with a boolean mask
    (B, 1, q, kv), True = attend.

    query (B, H, q, D), key/value (B, H_kv, kv, D) -> ((B, q, H, D), None), as transformers expects.
    Grouped-query heads are folded into the query length ((B, H_kv, G*q, D), the mask tiled G times)
    rather than passed with `enable_gqa`: SDPA sends a mask together with `enable_gqa` to its math
    kernel (a full float32 B x H x q x kv matrix), and expanding the cache's heads would copy it.
    """
    b, h, q_len, _ = query.shape
    with torch.autocast(device_type=query.device.type, enabled=False):
        q, mask = fold_grouped_heads(query.to(key.dtype), key.shape[1], attention_mask)
        out = F.scaled_dot_product_attention(q, key, value.to(key.dtype), attn_mask=mask, scale=scaling)
    return out.reshape(b, h, q_len, -1).transpose(1, 2).to(query.dtype).contiguous(), None


def fold_grouped_heads(query: torch.Tensor, kv_heads: int, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query heads folded into the query length, so attention runs on the keys' own heads.

    query (B, H, q, D), mask (B, 1, q, kv) bool -> query (B, H_kv, H/H_kv * q, D) and the mask tiled to match
    (B, 1, H/H_kv * q, kv): head h = kv_head * group + g reads rows [g * q, (g + 1) * q) of its key head. With
    one query position (decoding) the mask is returned as it is: SDPA broadcasts it (tiling it cost 2 % of a
    rollout; the same bits)."""
    b, h, q_len, d = query.shape
    group = h // kv_heads
    if group == 1 or q_len == 1:  # one query position: its mask row broadcasts over the group's rows as it is
        return query.reshape(b, kv_heads, group * q_len, d), mask
    return query.reshape(b, kv_heads, group * q_len, d), mask.repeat(1, 1, group, 1)


def cache_dtype(model, device: torch.device) -> torch.dtype:
    """The dtype of the KV cache and of attention: the compute dtype (autocast's, else the weights'), except on
    CPU, where attention runs in float32 (a bf16 single-query SDPA is slow there; docs/performance.md)."""
    if device.type == "cpu":
        return torch.float32
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return next(model.parameters()).dtype


def prompts_per_batch(config, prompts: int, rows_per_prompt: int, length: int, dtype: torch.dtype,
                      budget_bytes: int) -> int:
    """How many prompts one decoding batch takes so that its KV cache (every layer's keys and values for
    rows x length positions) stays within `budget_bytes` (at least one prompt). Where the prompt's keys are kept once
    for its samples (`decode_step.PromptSharedCache`) the cache is smaller: the bound still holds."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_row = 2 * config.num_hidden_layers * heads * head_dim * length * dtype.itemsize
    return max(1, min(prompts, budget_bytes // max(per_row * rows_per_prompt, 1)))


def worth_compacting(left: int, rows: int, device: torch.device) -> bool:
    """Whether the rows that finished leave a decoding batch of `rows` now that `left` still run (their cache rows
    are copied out: one copy of every layer's cache). Always at 8 rows or fewer. Under CPU bf16/fp16 autocast
    (oneDNN's kernels, whose time grows with every row) once a quarter of the rows finished: +8-16 % generated
    tokens/s on the bench's rollouts against the padded rule (docs/performance.md, ninth pass). Otherwise (MKL's
    float32 kernels, padded by `skinny_rows`, and GPUs) when that lowers the padded row count of the next step."""
    if left >= rows:
        return False
    if left <= 8:
        return True
    if device.type == "cpu" and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") != torch.float32:
        return left * 4 <= rows * 3
    return skinny_rows(left) < skinny_rows(rows)


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, float32_attention)


def supports_fast_decode(model) -> bool:
    """Whether `decode` can drive `model` (a plain transformers decoder of a known family)."""
    config = getattr(model, "config", None)
    return getattr(config, "model_type", None) in KNOWN_DECODER_TYPES and not hasattr(model, "peft_config")


def sample_tokens(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """One token per row from softmax(logits / temperature) restricted by top-k then top-p.

    logits: (B, V) float -> (B,) long. Exact: the inverse CDF at one uniform number per row
    (`torch.rand`, so `torch.manual_seed` reproduces a run). Masks follow transformers'
    TopK/TopP warpers: top-k keeps every token tied with the k-th largest; top-p drops the
    smallest tokens whose cumulative probability is <= 1 - top_p, always keeping the largest.
    """
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    x = mask_top_k(x, top_k)
    x = mask_top_p(x, top_p)
    u = torch.rand(x.shape[0], dtype=torch.float64, device=x.device)
    return inverse_cdf(torch.softmax(x, dim=-1), u)


CDF_BLOCK = 256


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The first index whose cumulative probability exceeds u x the row's total, per row.

    probs: (B, V) >= 0, u: (B,) float64 in [0, 1) -> (B,) long, never an index of probability 0.
    In two levels, so nothing (B, V)-sized is copied or scanned sequentially: the float64 masses of blocks of
    CDF_BLOCK tokens, their cumulative sum to find the block, then the cumulative sum inside that block only
    (a float64 cumsum over a whole 49k vocabulary took 10-54 ms per decoding step of 32 rows; docs/performance.md).
    """
    rows, vocab = probs.shape
    pad = (-vocab) % CDF_BLOCK
    blocks = (F.pad(probs, (0, pad)) if pad else probs).reshape(rows, -1, CDF_BLOCK)
    mass = blocks.sum(-1, dtype=torch.float64)  # (B, blocks)
    cdf = mass.cumsum(-1)
    target = u * cdf[:, -1]
    block = torch.searchsorted(cdf, target[:, None], right=True).squeeze(1)
    block = torch.minimum(block, (cdf < cdf[:, -1:]).sum(-1))  # rounding past the end: the last block with mass
    start = cdf.gather(1, block[:, None]).squeeze(1) - mass.gather(1, block[:, None]).squeeze(1)
    inner = blocks[torch.arange(rows, device=probs.device), block].double().cumsum(-1)  # (B, CDF_BLOCK)
    offset = torch.searchsorted(inner, (target - start)[:, None], right=True).squeeze(1)
    offset = torch.minimum(offset, (inner < inner[:, -1:]).sum(-1))  # likewise inside the block
    return block * CDF_BLOCK + offset


def mask_top_k(x: torch.Tensor, top_k: int) -> torch.Tensor:
    """x (B, V) with every entry below the k-th largest of its row set to -inf; k <= 0 is off."""
    if top_k <= 0 or top_k >= x.shape[-1]:
        return x
    kth = torch.topk(x, top_k, dim=-1).values[:, -1:]
    return x.masked_fill(x < kth, float("-inf"))


def mask_top_p(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """x (B, V) with the nucleus outside top_p set to -inf (transformers' TopPLogitsWarper); 1.0 is off."""
    if top_p >= 1.0:
        return x
    sorted_x, order = torch.sort(x, descending=False, dim=-1)
    cumulative = sorted_x.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= 1 - top_p
    drop_sorted[:, -1] = False  # keep at least the most likely token
    drop = drop_sorted.scatter(1, order, drop_sorted)
    return x.masked_fill(drop, float("-inf"))


CACHE_BUDGET_BYTES = 2 << 30  # CPU: one decoding batch's KV cache; more prompts are decoded in several batches
CUDA_FREE_FRACTION = 0.5  # CUDA: the share of the free device memory one decoding batch's KV cache may take


def kv_cache_budget(device: torch.device) -> int:
    """Bytes one decoding batch's KV cache may take on `device`: on CUDA `CUDA_FREE_FRACTION` of the memory free
    now (`torch.cuda.mem_get_info`; the rest is left to the logits, the sampler's (B, V) copies and whatever
    else shares the device, e.g. the trainer's optimizer), elsewhere `CACHE_BUDGET_BYTES` (host memory is not
    measured: 2 GiB holds SmolLM2-135M's cache for ~2,700 rows of 512 positions in float32)."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free * CUDA_FREE_FRACTION)
    return CACHE_BUDGET_BYTES


@torch.no_grad()
def decode(model, prompts: list[list[int]], n: int, max_new_tokens: int, eos_ids: list[int], pad_id: int, *,
           do_sample: bool = True, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           min_new_tokens: int = 0, return_logprobs: bool = False, cache_budget_bytes: int | None = None,
           between_tokens=None):
    """New tokens for `n` samples of each prompt: (len(prompts) * n, T) long, the n samples of prompt i
    in rows i*n ... i*n+n-1, padded with `pad_id` after EOS; T <= max_new_tokens (the longest row).
    With `return_logprobs`, also each sampled token's log-prob under softmax(logits / temperature) over
    the whole vocabulary (what the trainer computes; 0 after EOS): (tokens, logprobs), both (rows, T).
    With `between_tokens(t, rows_finished) -> bool` (a weight switch between tokens, see `_decode_steps`), also
    the number of switches before each token: (tokens, logprobs, switches), the last (rows, T) long.

    Runs under whatever autocast / RNG context the caller set. Greedy (`do_sample=False`) decodes
    each prompt once and repeats it n times. The KV cache is in the compute dtype (`cache_dtype`) and
    allocated per batch of prompts, a batch's cache within `cache_budget_bytes` (None: `kv_cache_budget`).
    """
    device = next(model.parameters()).device
    dtype = cache_dtype(model, device)
    rows = n if do_sample else 1
    length = max(len(p) for p in prompts) + max_new_tokens
    budget = kv_cache_budget(device) if cache_budget_bytes is None else cache_budget_bytes
    step = prompts_per_batch(model.config, len(prompts), rows, length, dtype, budget)
    _register_attention()
    saved = model.config._attn_implementation
    model.config._attn_implementation = ATTENTION
    try:
        with decoding_linears(model):
            switches = _Switches(between_tokens, n // rows) if between_tokens is not None else None
            parts = []
            for i in range(0, len(prompts), step):
                parts.append(_decode_batch(model, prompts[i : i + step], rows, max_new_tokens, eos_ids, pad_id, dtype,
                                           (do_sample, temperature, top_k, top_p, min_new_tokens, return_logprobs),
                                           switches))
                if switches is not None:
                    switches.done += parts[-1][0].shape[0]
    finally:
        model.config._attn_implementation = saved
    width = max(p[0].shape[1] for p in parts)
    out = torch.cat([F.pad(t, (0, width - t.shape[1]), value=pad_id) for t, _, _ in parts])
    logprobs = torch.cat([F.pad(lp, (0, width - lp.shape[1])) for _, lp, _ in parts])
    versions = None
    if switches is not None:  # past a row's end its last count repeats
        versions = torch.cat([torch.cat([v, v[:, -1:].expand(-1, width - v.shape[1])], 1) for _, _, v in parts])
    if rows != n:
        out, logprobs = out.repeat_interleave(n, dim=0), logprobs.repeat_interleave(n, dim=0)
        versions = versions.repeat_interleave(n, dim=0) if versions is not None else None
    if versions is not None:
        return out, logprobs, versions
    return (out, logprobs) if return_logprobs else out


class _Switches:
    """The `between_tokens` hook over all the decoding batches of one call: hook(t, rows finished so far, in
    samples) -> whether it switched the weights; counts the switches."""

    def __init__(self, hook, samples_per_row: int):
        self.hook, self.count, self.done, self.factor = hook, 0, 0, samples_per_row

    def __call__(self, t: int, finished: int) -> None:
        if self.hook(t, (self.done + finished) * self.factor):
            self.count += 1


def _decode_batch(model, prompts, rows, max_new_tokens, eos_ids, pad_id, dtype, sampling, switches=None):
    """(tokens, log-probs, switches or None), each (len(prompts) * rows, T): one prefill, then the decoding steps.

    Where `decoding_step` can run the model (`shared_step_supported`), the prompt's keys and values stay once per
    prompt (`PromptSharedCache`); otherwise the cache copies them to each of its rows and the steps run the model's
    own forward."""
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], device=device)
    valid = torch.zeros(len(prompts), width + max_new_tokens, dtype=torch.bool, device=device)
    for i, p in enumerate(prompts):
        valid[i, width - len(p) : width] = True
    positions = valid[:, :width].long().cumsum(-1) - 1
    shared = shared_step_supported(model)
    cache = KVCache(model.config.num_hidden_layers, width if shared else width + max_new_tokens, dtype)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    mask = causal[None] & valid[:, None, :width]
    mask |= torch.eye(width, dtype=torch.bool, device=device)[None]  # padding rows attend to themselves: no NaN
    logits = _forward(model, ids, mask[:, None], positions.clamp_min(0), cache)
    if shared:
        cache = PromptSharedCache(cache.keys, cache.values, valid[:, :width], rows, max_new_tokens)
        step = functools.partial(_shared_forward, model)
    else:
        step = functools.partial(_forward, model)
    if rows > 1:
        expand = torch.arange(len(prompts), device=device).repeat_interleave(rows)
        if not shared:
            cache.select_rows(expand)
        logits, valid, positions = logits[expand], valid[expand], positions[expand]
    return _decode_steps(step, cache, logits, valid, positions[:, -1] + 1, width, max_new_tokens, eos_ids, pad_id,
                         *sampling, switches=switches)


def _shared_forward(model, ids, mask, positions, cache) -> torch.Tensor:
    """`_forward` for a decoding step over a `PromptSharedCache` (the mask is the cache's own)."""
    return decoding_step(model, ids, positions, cache)


@functools.cache
def _cache_keyword(model_class) -> str:
    """The forward's name for the KV cache: `cache` from transformers 5.2x, `past_key_values` before (a model
    given the other name would silently run without a cache)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def _forward(model, ids, mask, positions, cache) -> torch.Tensor:
    """Logits (B, V) float32 of the last position; advances the cache by ids' length."""
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                **{_cache_keyword(type(model)): cache})
    cache.advance(ids.shape[1])
    return out.logits[:, -1].float()


def _decode_steps(forward, cache, logits, valid, next_pos, width, max_new_tokens, eos_ids, pad_id,
                  do_sample, temperature, top_k, top_p, min_new_tokens, return_logprobs=False, switches=None):
    """The token-by-token loop over the rows still running; returns (B, T) new tokens, their log-probs (zeros
    unless `return_logprobs`) and, with `switches`, the number of weight switches before each token (else None).

    One host sync per token: the count of rows still running (`left`), which decides both the stop and when
    finished rows leave. Everything else stays on the device: tokens and log-probs are written to every row of
    the batch (a finished row gets the padding it already holds), and the rows to keep are found by a stable
    sort of the running flags, whose first `left` entries are the running rows in order (what `nonzero` gives,
    without its sync). Finished rows leave the batch (cache rows too) when that shrinks the padded row count of
    the next step (`skinny_rows`) or at most 8 rows remain; until then they ride along, their tokens discarded,
    which is cheaper than copying every layer's cache (`worth_compacting`).

    switches(t), when given, runs the `between_tokens` hook before the forward that gives the logits of token t
    (t >= 1), which may change the model's weights in place (partial_rollout: switch): the keys/values of the
    earlier tokens stay as the old weights computed them, and tokens from t on count one more switch."""
    batch = logits.shape[0]
    device = logits.device
    out = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
    out_logprobs = torch.zeros((batch, max_new_tokens), device=device)
    counts = []  # per step: the weight switches made before its token was sampled
    scale = temperature if do_sample else 1.0
    eos = torch.tensor(eos_ids, device=device)
    alive = torch.arange(batch, device=device)  # original row of each row in the batch
    running = torch.ones(batch, dtype=torch.bool, device=device)
    steps = 0
    for t in range(max_new_tokens):
        x = logits.to(torch.float32, copy=True)  # (B, V): one copy, masked and scaled in place
        if scale != 1.0:
            x /= scale
        # log-probs over the unmasked logits, taken before min_new_tokens masks EOS (one log_softmax: 0.6 ms for
        # 32 x 49,152 where x - logsumexp(x) took 1.5)
        log_probs = torch.log_softmax(x, dim=-1) if return_logprobs else None
        if t < min_new_tokens:
            x[:, eos] = float("-inf")
        token = sample_tokens(x, 1.0, top_k, top_p) if do_sample else x.argmax(-1)
        if switches is not None:
            counts.append(switches.count)
        out[alive, t] = torch.where(running, token, pad_id)
        if log_probs is not None:
            out_logprobs[alive, t] = torch.where(running, log_probs.gather(1, token[:, None]).squeeze(1), 0.0)
        steps = t + 1
        running &= ~torch.isin(token, eos)
        left = int(running.sum())  # the loop's one host sync per token
        if t == max_new_tokens - 1 or left == 0:
            break
        if worth_compacting(left, len(running), device):
            keep = torch.sort((~running).to(torch.uint8), stable=True).indices[:left]
            alive, token, next_pos, valid, running = alive[keep], token[keep], next_pos[keep], valid[keep], running[keep]
            cache.select_rows(keep)
        valid[:, width + t] = True
        end = width + t + 1
        if switches is not None:
            switches(t + 1, batch - left)
        logits = forward(token[:, None], valid[:, None, None, :end], next_pos[:, None], cache)
        next_pos = next_pos + 1
    versions = None
    if switches is not None:  # (B, T): the same for every row of the batch
        versions = torch.tensor(counts, dtype=torch.long, device=device).expand(batch, steps).clone()
    return out[:, :steps], out_logprobs[:, :steps], versions
