"""Forward passes over rollout batches: response log-probs, entropies and values.

Only the response positions go through the LM head (`logits_to_keep`), so a 49k-token vocabulary
costs (B, R, V) and never (B, P + R, V).
"""

from __future__ import annotations

import torch

from ppokit.algos.logprobs import entropy_from_logits, token_logprobs, token_logprobs_and_entropy
from ppokit.models.loading import autocast_context
from ppokit.training.batch import RolloutBatch


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, L) positions that skip left padding, as `generate` computes them."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp_min(0)


def response_logits(model, batch: RolloutBatch) -> torch.Tensor:
    """(B, R, V) next-token logits at the positions that predict each response token."""
    R = batch.response_mask.shape[1]
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=position_ids(batch.attention_mask),
        logits_to_keep=R + 1,
        use_cache=False,
    )
    return out.logits[:, :-1, :]


def policy_forward(model, batch: RolloutBatch, chunk_size: int, entropy: str, compute_dtype, device,
                   temperature: float = 1.0):
    """Response log-probs (B, R) and entropies (B, R) or None of `model` on `batch`.

    entropy: "grad" (differentiable), "detached" (for logging only) or "none".
    """
    labels = batch.input_ids[:, batch.prompt_len :]
    with autocast_context(compute_dtype, device):
        logits = response_logits(model, batch)
    # Log-probs of the distribution that was sampled from (logits / temperature), as verl does.
    t = temperature if temperature and temperature > 0 else 1.0
    if entropy == "detached":  # logged only: from the same float32 chunks as the log-probs
        return token_logprobs_and_entropy(logits, labels, chunk_size=chunk_size, temperature=t)
    logp = token_logprobs(logits, labels, chunk_size=chunk_size, temperature=t)
    ent = entropy_from_logits(logits, chunk_size=chunk_size, temperature=t) if entropy == "grad" else None
    return logp, ent


@torch.no_grad()
def per_micro_batch(model, batch: RolloutBatch, micro_batch_size: int, forward) -> torch.Tensor:
    """(B, R) token values `forward(part)` computed in eval mode, micro-batch by micro-batch, without grad."""
    was_training = model.training
    model.eval()
    out = torch.zeros_like(batch.response_mask)
    try:
        for start in range(0, len(batch), micro_batch_size):
            idx = list(range(start, min(start + micro_batch_size, len(batch))))
            part = batch.select(idx).trimmed()
            values = forward(part)
            out[start : start + len(idx), : values.shape[1]] = values.float() * part.response_mask
    finally:
        model.train(was_training)
    return out


def batched_logprobs(model, batch: RolloutBatch, micro_batch_size: int, chunk_size: int, compute_dtype, device,
                     temperature: float = 1.0):
    """(B, R) log-probs of the responses under `model`, computed in micro-batches without grad."""
    return per_micro_batch(model, batch, micro_batch_size, lambda part: policy_forward(
        model, part, chunk_size, "none", compute_dtype, device, temperature)[0])


def batched_values(value_model, batch: RolloutBatch, micro_batch_size: int, compute_dtype, device):
    """(B, R) critic values at the positions that predict each response token, without grad."""
    return per_micro_batch(value_model, batch, micro_batch_size,
                           lambda part: value_forward(value_model, part, compute_dtype, device))


def value_forward(value_model, batch: RolloutBatch, compute_dtype, device) -> torch.Tensor:
    """(B, R) values V(s_t) for the state before each response token (with grad)."""
    R = batch.response_mask.shape[1]
    with autocast_context(compute_dtype, device):
        values = value_model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=position_ids(batch.attention_mask),
        )
    return values[:, -R - 1 : -1].float()
