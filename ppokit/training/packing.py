"""A prompt's rows packed into one: the prompt once, then its responses back to back, under a block mask.

GRPO samples `rollout_n` responses per prompt, and the prompt is most of each sequence (44 of ~64
tokens in the default work). One packed row per distinct prompt,

    [left padding | prompt | response 1 | response 2 | ... | response n | right padding],

with a mask under which every response token sees the prompt and its own response's earlier tokens —
exactly the context it has in its own row — and positions that restart after the prompt for every
response, gives each token the hidden states it gets in its own row. The prompt is computed once per
micro-batch instead of n times, and responses carry no padding but the last row's.

Only for decoder families whose attention takes such a mask as given (transformers returns a 4D mask
as-is) and attention implemented by SDPA; anything else runs whole rows (`forward.full_response_logits`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppokit.models.loading import KNOWN_DECODER_TYPES

MAX_PACKED_LEN = 2048  # longest packed row (prompt + a prompt's responses) worth a dense L x L mask


@dataclass(frozen=True)
class PackedRows:
    """G packed rows of L columns; K = L - P + 1 kept logit columns (the last prompt position onward)."""

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
    allowed) and saves work: a
    known decoder family under SDPA, no sliding window shorter than the rows, a repeated prompt, and packed
    rows no longer than MAX_PACKED_LEN (the mask is L x L, and long rows make attention, not the
    matmuls, the cost: long-context runs keep whole rows)."""
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
                   prompt_len: int) -> PackedRows:
    """Pack the rows of a (B, P + R) batch (left-padded prompts, right-padded responses) by prompt.

    response_mask: (B, R) with each row's real tokens first. Rows whose response is empty take no column.
    """
    device = input_ids.device
    input_ids, attention_mask, response_mask = input_ids.cpu(), attention_mask.cpu(), response_mask.cpu()
    P = prompt_len
    ids_u, mask_u, group = unique_prompts(input_ids, attention_mask, P)
    lengths = response_mask.sum(1).long().tolist()
    filled = [0] * len(ids_u)
    offsets = []
    for g, n in zip(group.tolist(), lengths):
        offsets.append(filled[g])
        filled[g] += n
    K = max(filled) + 1
    L = P + K - 1
    ids = torch.zeros((len(ids_u), L), dtype=input_ids.dtype)
    ids[:, :P] = ids_u
    segment = torch.full((len(ids_u), L), -2, dtype=torch.long)  # -1 prompt, r response of row r, -2 padding
    segment[:, :P] = torch.where(mask_u.bool(), -1, -2)
    positions = torch.zeros((len(ids_u), L), dtype=torch.long)
    positions[:, :P] = (mask_u.long().cumsum(-1) - 1).clamp_min(0)
    prompt_lengths = mask_u.long().sum(1)
    for r, (g, start, n) in enumerate(zip(group.tolist(), offsets, lengths)):
        cols = slice(P + start, P + start + n)
        ids[g, cols] = input_ids[r, P : P + n]
        segment[g, cols] = r
        positions[g, cols] = prompt_lengths[g] + torch.arange(n)
    return PackedRows(ids.to(device), block_mask(segment).to(device), positions.to(device),
                      logit_rows(group, offsets, lengths, response_mask.shape[1], K).to(device), K)


def block_mask(segment: torch.Tensor) -> torch.Tensor:
    """(G, 1, L, L) bool from segment ids (G, L) (-1 prompt, r >= 0 a response, -2 padding): a prompt token
    attends the prompt up to itself; a response token the whole prompt and its own response up to itself;
    padding only itself (so no query row is empty)."""
    L = segment.shape[1]
    col = torch.arange(L)
    causal = col[:, None] >= col[None, :]  # (query, key)
    prompt_key = (segment == -1)[:, None, :]
    real_query = (segment != -2)[:, :, None]
    same_response = (segment[:, :, None] == segment[:, None, :]) & (segment >= 0)[:, :, None]
    mask = causal[None] & ((prompt_key & real_query) | same_response)
    mask |= torch.eye(L, dtype=torch.bool)[None]
    return mask[:, None]


def logit_rows(group: torch.Tensor, offsets: list[int], lengths: list[int], R: int, K: int) -> torch.Tensor:
    """(B, R) rows of the flattened kept logits: kept column 0 (the last prompt position) predicts every
    response's first token; column start + j its token j (j >= 1). Columns past a response point at 0."""
    j = torch.arange(R)[None]
    start = torch.tensor(offsets, dtype=torch.long)[:, None]
    column = torch.where(j == 0, 0, start + j)
    column = torch.where(j < torch.tensor(lengths)[:, None], column, 0)
    return group[:, None] * K + column
