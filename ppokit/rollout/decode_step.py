"""A decoding step whose attention reads each prompt's keys and values once for all of its samples.

The n samples of a prompt share its prefill: the same keys and values for every prompt position. A cache that
copies them to every sample (`decode.KVCache.select_rows`) makes each decoding step's attention read them n times;
on a CPU that attention is bandwidth-bound (float32 keys and values, one query per row), so those reads are most of
its time. `PromptSharedCache` keeps the prompt's keys and values once per prompt and each row's own keys and values
for its generated tokens only, and `shared_attention` computes one softmax over both parts: the prompt part as one
product per prompt and key head over all its samples' queries, the response part per row.

`decoding_step` runs one token of the model's own modules (embedding, rotary embedding, norms, q/k/v/o projections,
MLP, LM head, the family's `apply_rotary_pos_emb`) around that attention, for the Llama-family decoders `decode`
supports whose modules have the usual layout and no hooks (`shared_step_supported`). Only the attention differs from
the transformers forward: the same softmax over the same keys, summed in another order (float32 rounding).
docs/performance.md (eleventh pass) has the measurements.
"""

from __future__ import annotations

import sys

import torch

DECODER_PARTS = ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")
ATTENTION_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling")


class PromptSharedCache:
    """Keys/values of each prompt's prefill (P, H_kv, W, D) per layer, kept once for its samples, and of every row's
    generated tokens (B, H_kv, max_new_tokens, D) per layer, written in place.

    Rows are the prompts' samples in order: row slot s belongs to prompt s // samples. `slots` (B,) holds each
    running row's slot (finished rows leave through `select_rows`); `prompt_mask` (P, 1, 1, W) is 0 where a
    prompt position is attended, -inf on its left padding.
    """

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], prompt_valid: torch.Tensor,
                 samples: int, max_new_tokens: int):
        prompts, kv_heads, _, head_dim = keys[0].shape
        self.prompt_keys, self.prompt_values, self.samples = keys, values, samples
        rows = prompts * samples
        self.keys = [k.new_zeros((rows, kv_heads, max_new_tokens, head_dim)) for k in keys]
        self.values = [v.new_zeros((rows, kv_heads, max_new_tokens, v.shape[-1])) for v in values]
        self.prompt_mask = torch.zeros(prompt_valid.shape, dtype=keys[0].dtype, device=keys[0].device)
        self.prompt_mask = self.prompt_mask.masked_fill(~prompt_valid, float("-inf"))[:, None, None, :]
        self.slots = torch.arange(rows, device=keys[0].device)
        self.length = 0  # generated positions written so far

    @property
    def all_rows(self) -> bool:
        """Every slot still runs (slots are ascending and distinct): the slot layout is the batch itself."""
        return self.slots.shape[0] == self.prompt_keys[0].shape[0] * self.samples

    def write(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> int:
        """Store a step's key/value (B, H_kv, 1, D) at the next generated position; returns the positions to attend."""
        self.keys[layer][:, :, self.length : self.length + 1] = key
        self.values[layer][:, :, self.length : self.length + 1] = value
        return self.length + 1

    def select_rows(self, index: torch.Tensor) -> None:
        """Keep only the batch rows `index` (ascending: finished rows leave, the order stays)."""
        self.keys = [k.index_select(0, index) for k in self.keys]
        self.values = [v.index_select(0, index) for v in self.values]
        self.slots = self.slots[index]


def to_prompt_groups(x: torch.Tensor, cache: PromptSharedCache) -> torch.Tensor:
    """Per-row x (B, H_kv, G, L) -> per-prompt (P, H_kv, samples * G, L); absent rows are zeros."""
    prompts, kv_heads, samples = cache.prompt_keys[0].shape[0], x.shape[1], cache.samples
    if not cache.all_rows:
        x = x.new_zeros((prompts * samples, *x.shape[1:])).index_copy_(0, cache.slots, x)
    grouped = x.reshape(prompts, samples, kv_heads, *x.shape[2:]).transpose(1, 2)
    return grouped.reshape(prompts, kv_heads, samples * x.shape[2], x.shape[3])


def from_prompt_groups(x: torch.Tensor, cache: PromptSharedCache, group: int) -> torch.Tensor:
    """Inverse of `to_prompt_groups`: (P, H_kv, samples * G, L) -> (B, H_kv, G, L) for the running rows."""
    prompts, kv_heads, _, width = x.shape
    rows = x.reshape(prompts, kv_heads, cache.samples, group, width).transpose(1, 2)
    rows = rows.reshape(prompts * cache.samples, kv_heads, group, width)
    return rows if cache.all_rows else rows.index_select(0, cache.slots)


def shared_attention(query: torch.Tensor, cache: PromptSharedCache, layer: int, length: int,
                     scaling: float) -> torch.Tensor:
    """Softmax attention of one query position per row over its prompt's keys and its own generated ones.

    query (B, H, 1, D) -> (B, 1, H * D) in the query's dtype, computed in the cache's dtype with autocast off (a CPU autocast would run these
    products in bf16). Heads h = kv_head * G + g share key head kv_head, as in grouped-query attention."""
    rows, heads, _, head_dim = query.shape
    prompt_keys, prompt_values = cache.prompt_keys[layer], cache.prompt_values[layer]
    kv_heads, width = prompt_keys.shape[1], prompt_keys.shape[2]
    group = heads // kv_heads
    with torch.autocast(device_type=query.device.type, enabled=False):
        q = query.to(prompt_keys.dtype).reshape(rows, kv_heads, group, head_dim)
        own_keys, own_values = cache.keys[layer][:, :, :length], cache.values[layer][:, :, :length]
        prompt_scores = torch.matmul(to_prompt_groups(q, cache), prompt_keys.transpose(-1, -2))  # (P, H_kv, nG, W)
        prompt_scores = from_prompt_groups(prompt_scores + cache.prompt_mask, cache, group)
        scores = torch.cat([prompt_scores, torch.matmul(q, own_keys.transpose(-1, -2))], dim=-1).mul_(scaling)
        probs = torch.softmax(scores, dim=-1)  # (B, H_kv, G, W + length)
        from_prompt = torch.matmul(to_prompt_groups(probs[..., :width], cache), prompt_values)
        out = from_prompt_groups(from_prompt, cache, group) + torch.matmul(probs[..., width:], own_values)
    return out.reshape(rows, 1, heads * head_dim).to(query.dtype)


def attention_block(attn, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: PromptSharedCache,
                    layer: int) -> torch.Tensor:
    """The self-attention module's computation for one token per row: hidden (B, 1, C) -> (B, 1, C)."""
    rows, head_dim = hidden.shape[0], attn.head_dim
    shape = (rows, 1, -1, head_dim)
    query, key = attn.q_proj(hidden).view(shape), attn.k_proj(hidden).view(shape)
    if hasattr(attn, "q_norm"):  # Qwen3: RMS norms over each head's dimensions before the rotation
        query, key = attn.q_norm(query), attn.k_norm(key)
    value = attn.v_proj(hidden).view(shape).transpose(1, 2)
    query, key = rotary_function(attn)(query.transpose(1, 2), key.transpose(1, 2), cos, sin)
    length = cache.write(layer, key, value)
    out = shared_attention(query, cache, layer, length, attn.scaling)
    return attn.o_proj(out)


def rotary_function(attn):
    """The `apply_rotary_pos_emb` of the attention module's own family (Llama, Mistral, Qwen2, Qwen3)."""
    return sys.modules[type(attn).__module__].apply_rotary_pos_emb


def decoding_step(model, tokens: torch.Tensor, positions: torch.Tensor, cache: PromptSharedCache) -> torch.Tensor:
    """Logits (B, V) float32 of the next token after `tokens` (B, 1) at `positions` (B, 1); advances the cache."""
    base = model.model
    hidden = base.embed_tokens(tokens)
    cos, sin = base.rotary_emb(hidden, positions)
    for index, layer in enumerate(base.layers[: model.config.num_hidden_layers]):
        hidden = hidden + attention_block(layer.self_attn, layer.input_layernorm(hidden), cos, sin, cache, index)
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    cache.length += 1
    return model.lm_head(base.norm(hidden))[:, -1].float()


def shared_step_supported(model) -> bool:
    """Whether `decoding_step` computes what `model`'s own forward computes: a plain Llama-family causal LM (the
    layout checked part by part) with no forward hooks on the modules the step does not call (the model, its
    decoder, the layers and their attention modules), whose hooks would not run. DeepSpeed's engine hooks on the
    model itself are let be: its forward prologue and epilogue account for the engine's own forwards, and
    generation is not one (with ZeRO-3, whose parameter hooks are on every module, the step is not taken)."""
    base = getattr(model, "model", None)
    if base is None or not all(hasattr(base, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return False
    if not hasattr(model, "lm_head") or own_hooks(model, allowed="DeepSpeedEngine.") or own_hooks(base):
        return False
    if torch.nn.modules.module._global_forward_hooks or torch.nn.modules.module._global_forward_pre_hooks:
        return False
    for layer in base.layers:
        if not all(hasattr(layer, name) for name in DECODER_PARTS) or own_hooks(layer):
            return False
        attn = layer.self_attn
        if not all(hasattr(attn, name) for name in ATTENTION_PARTS) or own_hooks(attn):
            return False
        if not hasattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb"):
            return False
    return True


def own_hooks(module, allowed: str | None = None) -> bool:
    """Whether `module` has forward (pre-)hooks, leaving out those whose function's qualified name holds `allowed`."""
    hooks = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
    return any(allowed is None or allowed not in getattr(h, "__qualname__", "") for h in hooks)
