"""Rows packed by prompt: each prompt once, then its responses back to back, under a block mask.

GRPO samples `rollout_n` responses per prompt, and the prompt is most of each sequence (44 of ~64
tokens in the default work). Packed rows hold whole groups, back to back,

    [prompt A | A's response 1 | ... | A's response n | prompt B | B's responses ... | padding],

with a mask under which every response token sees its own prompt and its own response's earlier tokens
— exactly the context it has in its own row — and positions that restart after the prompt for every
response, so each token gets the hidden states it gets in its own row. A prompt is computed once per
micro-batch instead of n times, and padding is only what is left at the end of a packed row: groups
are placed first-fit-decreasing into rows as long as the longest group (short groups share a row).
Longer rows measured slower (docs/performance.md): the LM head runs on every row's kept columns and
attention's dense L x L mask grows.

Only for decoder families whose attention takes such a mask as given (transformers returns a 4D mask
as-is) and attention implemented by SDPA; anything else runs whole rows (`forward.full_response_logits`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ppokit.models.loading import KNOWN_DECODER_TYPES
from ppokit.rollout.decode import fold_grouped_heads

MAX_PACKED_LEN = 2048  # longest group (prompt + its responses) worth a dense L x L mask
PACKED_ATTENTION = "ppokit_packed"


def packed_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Attention of packed rows on a CPU as two matmuls and a float32 softmax, with their autograd.

    query (G, H, L, D), key/value (G, H_kv, L, D), attention_mask (G, 1, L, L) bool -> ((G, L, H, D), None), as
    transformers expects. Grouped-query heads are folded into the query length ((G, H_kv, H/H_kv * L, D), the mask
    tiled), so keys and values are never repeated per head. SDPA's CPU kernels took twice as long on these rows
    (forward + backward, 4 x 9 heads x 152 tokens, bf16: 16-18 ms vs 7.5-9 ms; docs/performance.md).
    """
    g, h, length, _ = query.shape
    q, mask = fold_grouped_heads(query, key.shape[1], attention_mask)
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * scaling
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # (G, H_kv, H/H_kv * L, D)
    return out.reshape(g, h, length, -1).transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def packed_attention_on(model):
    """Inside the block, a CPU model's attention is `packed_attention` (the packed rows' 4D mask is passed as
    is). Not under activation checkpointing: its recomputation in backward runs after the block, with SDPA."""
    module = getattr(model, "module", model)
    config = module.config
    checkpointed = getattr(module, "is_activation_checkpointing", None)
    checkpointed = checkpointed if checkpointed is not None else getattr(module, "is_gradient_checkpointing", False)
    if next(module.parameters()).device.type != "cpu" or checkpointed or config._attn_implementation != "sdpa":
        yield
        return
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    config._attn_implementation = PACKED_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"


@dataclass(frozen=True)
class PackedRows:
    """G packed rows of L columns; the last K columns go through the LM head (from the first row prompt's last
    token onward)."""

    input_ids: torch.Tensor  # (G, L)
    attention_mask: torch.Tensor  # (G, 1, L, L) bool, True = the query (dim 2) attends the key (dim 3)
    position_ids: torch.Tensor  # (G, L)
    logit_index: torch.Tensor  # (B, R) row of the flattened (G * K, V) kept logits that predicts each response token
    keep: int  # K


def unique_prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int):
    """(ids (U, P), mask (U, P), row_to_prompt (B,)): the distinct left-padded prompts (compared by tokens
    and padding, not group id) and which one each row carries."""
    P = prompt_len
    both = torch.cat([input_ids[:, :P], attention_mask[:, :P].to(input_ids.dtype)], 1)
    unique, inverse = torch.unique(both, dim=0, return_inverse=True)
    return unique[:, :P], unique[:, P:].to(attention_mask.dtype), inverse


def can_pack(model, batch) -> bool:
    """Whether packing `batch` (a RolloutBatch) applies to `model` (a DeepSpeed engine or PEFT wrapper
    allowed) and saves work: a known decoder family under SDPA, no sliding window shorter than the rows,
    a repeated prompt, and no group longer than MAX_PACKED_LEN (the mask is L x L, and long rows make
    attention, not the matmuls, the cost: long-context runs keep whole rows)."""
    module = getattr(model, "module", model)  # a DeepSpeed engine's model
    config = getattr(module, "config", None)
    if getattr(config, "model_type", None) not in KNOWN_DECODER_TYPES:
        return False
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    if window is not None and batch.input_ids.shape[1] > window:
        return False
    if batch.prompt_len == 0 or len(batch) < 2:
        return False
    ids, _, group = unique_prompts(batch.input_ids, batch.attention_mask, batch.prompt_len)
    if len(ids) == len(batch):
        return False
    lengths = batch.response_mask.sum(1).to(group.device)
    totals = torch.zeros(len(ids), dtype=lengths.dtype, device=group.device).index_add_(0, group, lengths)
    return batch.prompt_len + int(totals.max()) <= MAX_PACKED_LEN


def pack_by_prompt(input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor,
                   prompt_len: int, row_target: int = 0) -> PackedRows:
    """Pack the rows of a (B, P + R) batch (left-padded prompts, right-padded responses) by prompt, into
    rows as long as the longest group or `row_target`, whichever is longer.

    response_mask: (B, R) with each row's real tokens first. Rows whose response is empty take no column.
    """
    device = input_ids.device
    input_ids, attention_mask, response_mask = input_ids.cpu(), attention_mask.cpu(), response_mask.cpu()
    P = prompt_len
    ids_u, mask_u, group = unique_prompts(input_ids, attention_mask, P)
    prompts = [ids_u[u][mask_u[u].bool()] for u in range(len(ids_u))]
    lengths = response_mask.sum(1).long().tolist()
    members = [[] for _ in prompts]
    for r, u in enumerate(group.tolist()):
        members[u].append(r)
    sizes = [len(prompts[u]) + sum(lengths[r] for r in members[u]) for u in range(len(prompts))]
    bins = first_fit_decreasing(sizes, max(row_target, max(sizes)))
    L = max(sum(sizes[u] for u in b) for b in bins)
    ids = torch.zeros((len(bins), L), dtype=input_ids.dtype)
    owner = torch.full((len(bins), L), -1, dtype=torch.long)  # prompt group of each column, -1 padding
    response = torch.full((len(bins), L), -1, dtype=torch.long)  # response row of each column, -1 prompt
    positions = torch.zeros((len(bins), L), dtype=torch.long)
    predicts = torch.zeros(response_mask.shape, dtype=torch.long)  # (B, R) (row, column) flattened as row * L + col
    for b, groups in enumerate(bins):
        col = 0
        for u in groups:
            n = len(prompts[u])
            cols = slice(col, col + n)
            ids[b, cols], owner[b, cols], positions[b, cols] = prompts[u], u, torch.arange(n)
            last_prompt, col = col + n - 1, col + n
            for r in members[u]:
                m = lengths[r]
                cols = slice(col, col + m)
                ids[b, cols], owner[b, cols], response[b, cols] = input_ids[r, P : P + m], u, r
                positions[b, cols] = n + torch.arange(m)
                if m:  # token 0 is predicted by the prompt's last column, token j >= 1 by token j - 1's
                    predicts[r, :m] = b * L + torch.cat([torch.tensor([last_prompt]), torch.arange(col, col + m - 1)])
                col += m
    first_kept = min(len(prompts[groups[0]]) - 1 for groups in bins)  # every row starts with a prompt
    K = L - first_kept
    row, column = predicts // L, predicts % L - first_kept
    logit_index = torch.where(response_mask.bool(), row * K + column, 0)
    return PackedRows(ids.to(device), block_mask(owner, response).to(device), positions.to(device),
                      logit_index.to(device), K)


def first_fit_decreasing(sizes: list[int], capacity: int) -> list[list[int]]:
    """Indices of `sizes` in bins of total <= capacity (each size <= capacity): largest first, each into the
    first bin with room."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        for b, left in enumerate(room):
            if sizes[i] <= left:
                bins[b].append(i)
                room[b] -= sizes[i]
                break
        else:
            bins.append([i])
            room.append(capacity - sizes[i])
    return bins


def block_mask(owner: torch.Tensor, response: torch.Tensor) -> torch.Tensor:
    """(G, 1, L, L) bool from each column's prompt group (G, L) (-1 padding) and response row (G, L) (-1 for a
    prompt token): a prompt token attends its prompt up to itself; a response token its whole prompt and
    its own response up to itself; padding only itself (so no query row is empty)."""
    L = owner.shape[1]
    col = torch.arange(L, device=owner.device)
    causal = (col[:, None] >= col[None, :])[None]  # (1, query, key)
    same_group = (owner[:, :, None] == owner[:, None, :]) & (owner >= 0)[:, :, None]
    visible = (response == -1)[:, None, :] | (response[:, :, None] == response[:, None, :])
    mask = causal & same_group & visible
    mask |= torch.eye(L, dtype=torch.bool, device=owner.device)[None]
    return mask[:, None]
