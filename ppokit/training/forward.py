"""Forward passes over rollout batches: response log-probs, entropies and values.

Only the response positions go through the LM head (`logits_to_keep`), and only the N real response
tokens reach it: the model's forward stops at the final hidden states and the head runs `chunk_size` tokens at
a time (`lm_head.py`), so a 152k-token vocabulary costs (chunk_size, V) at once, never (N, V) nor
(B, P + R, V). Rows that share a prompt go through the model packed, the prompt once (packing.py).

Precision (`compute_context`): a DeepSpeed engine computes in the dtype of its config's `torch_autocast` section,
entered inside `engine.forward`; plain modules (the reference, `engine.module` for old log-probs and values, the
rollout's model) run under the same autocast from outside. No autocast is ever put around an engine: DeepSpeed
switches it off inside on CUDA only.
"""

from __future__ import annotations

import contextlib

import torch

from ppokit.algos.logprobs import entropy_from_logits, token_logprobs, token_logprobs_and_entropy
from ppokit.models.loading import autocast_context
from ppokit.training.batch import RolloutBatch
from ppokit.training.device import to_model_device
from ppokit.training.lm_head import (
    chunked_head_logprobs,
    head_skipped,
    split_head,
    tied_embedding_gradient_kept,
)
from ppokit.training.packing import can_pack, pack_by_prompt, packed_attention_on


def position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, L) positions that skip left padding, as `generate` computes them."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.clamp_min(0)


def is_engine(model) -> bool:
    """Whether `model` is a DeepSpeed engine (whose forward applies its config's precision itself)."""
    return hasattr(model, "torch_autocast_enabled") and hasattr(model, "module")


def compute_context(model, compute_dtype, device):
    """The context a forward of `model` runs in to compute in `compute_dtype`: nothing around a DeepSpeed engine
    (its `torch_autocast` section casts inside its forward, on every device), `autocast_context` around anything
    else. An engine whose config disagrees with `compute_dtype` is a RuntimeError, not a silent float32 forward."""
    if not is_engine(model):
        return autocast_context(compute_dtype, device)
    if compute_dtype in (None, torch.float32) or model.fp16_enabled() or model.bfloat16_enabled():
        return contextlib.nullcontext()  # float32, or DeepSpeed's own half-precision weights
    if not model.torch_autocast_enabled() or model.torch_autocast_dtype() != compute_dtype:
        raise RuntimeError(f"this DeepSpeed engine would compute in float32, but the run computes in {compute_dtype}: "
                           "build its config with deepspeed_config(compute_dtype=...) (the torch_autocast section)")
    return contextlib.nullcontext()


def response_logits(model, batch: RolloutBatch) -> torch.Tensor:
    """(N, V) next-token logits at the positions that predict the N real response tokens (response_mask's
    ones, row by row); padding never reaches the vocabulary-wide work that follows.

    When rows share a prompt (GRPO's `rollout_n` samples) they go through the model packed, one row per
    prompt (`packing.pack_by_prompt`): the same hidden states for a fraction of the work. Otherwise the
    whole rows go through once.
    """
    if can_pack(model, batch):
        return packed_response_logits(model, batch)
    return full_response_logits(model, batch)


def full_response_logits(model, batch: RolloutBatch) -> torch.Tensor:
    """`response_logits` by one forward over the whole (B, P + R) rows."""
    R = batch.response_mask.shape[1]
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=position_ids(batch.attention_mask),
        logits_to_keep=R + 1,
        use_cache=False,
    )
    return out.logits[:, :-1, :][batch.response_mask.bool().to(out.logits.device)]


def packed_response_logits(model, batch: RolloutBatch) -> torch.Tensor:
    """`response_logits` by one forward over the rows packed by prompt; only the kept columns (the last
    prompt position onward) go through the LM head, then each response token's row is gathered."""
    packed = pack_by_prompt(batch.input_ids, batch.attention_mask, batch.response_mask, batch.prompt_len)
    with packed_attention_on(model):
        out = model(
            input_ids=packed.input_ids,
            attention_mask=packed.attention_mask,
            position_ids=packed.position_ids,
            logits_to_keep=packed.keep,
            use_cache=False,
        )
    logits = out.logits
    index = packed.logit_index[batch.response_mask.bool().to(packed.logit_index.device)]
    return logits.reshape(-1, logits.shape[-1])[index.to(logits.device)]


def policy_forward(model, batch: RolloutBatch, chunk_size: int, entropy: str, compute_dtype, device,
                   temperature: float = 1.0):
    """Response log-probs (B, R) and entropies (B, R) or None of `model` on `batch`; 0 at padding.

    entropy: "grad" (differentiable), "detached" (for logging only) or "none".
    """
    real = batch.response_mask.bool()
    labels = batch.input_ids[:, batch.prompt_len :][real.to(batch.input_ids.device)][None]  # (1, N)
    head = split_head(model)
    with compute_context(model, compute_dtype, device), head_skipped(head), tied_embedding_gradient_kept(model, head):
        logits = response_logits(model, batch)[None]  # (1, N, V); (1, N, H) hidden states when the head is split
    # Log-probs of the distribution that was sampled from (logits / temperature), as verl does.
    t = temperature if temperature and temperature > 0 else 1.0
    if head is not None:
        logp, ent = chunked_head_logprobs(head, logits, labels, chunk_size, entropy, t, compute_dtype, device)
    elif entropy == "detached":  # logged only: from the same float32 chunks as the log-probs
        logp, ent = token_logprobs_and_entropy(logits, labels, chunk_size=chunk_size, temperature=t)
    else:
        logp = token_logprobs(logits, labels, chunk_size=chunk_size, temperature=t)
        ent = entropy_from_logits(logits, chunk_size=chunk_size, temperature=t) if entropy == "grad" else None

    def per_row(values: torch.Tensor) -> torch.Tensor:  # (1, N) -> (B, R), zeros at padding
        return torch.zeros(real.shape, dtype=values.dtype, device=values.device).masked_scatter(
            real.to(values.device), values[0])

    return per_row(logp), None if ent is None else per_row(ent)


@torch.no_grad()
def per_micro_batch(model, batch: RolloutBatch, micro_batch_size: int, forward, device) -> torch.Tensor:
    """(B, R) token values `forward(part)` computed in eval mode, micro-batch by micro-batch, without grad; each
    micro-batch moved to the model's `device`, the values back to the batch's."""
    was_training = model.training
    model.eval()
    out = torch.zeros_like(batch.response_mask)
    try:
        for start in range(0, len(batch), micro_batch_size):
            idx = list(range(start, min(start + micro_batch_size, len(batch))))
            part = to_model_device(batch.select(idx).trimmed(), device)
            values = forward(part)
            out[start : start + len(idx), : values.shape[1]] = (values.float() * part.response_mask).to(out.device)
    finally:
        model.train(was_training)
    return out


def batched_logprobs(model, batch: RolloutBatch, micro_batch_size: int, chunk_size: int, compute_dtype, device,
                     temperature: float = 1.0):
    """(B, R) log-probs of the responses under `model`, computed in micro-batches without grad."""
    return per_micro_batch(model, batch, micro_batch_size, lambda part: policy_forward(
        model, part, chunk_size, "none", compute_dtype, device, temperature)[0], device)


def batched_values(value_model, batch: RolloutBatch, micro_batch_size: int, compute_dtype, device):
    """(B, R) critic values at the positions that predict each response token, without grad."""
    return per_micro_batch(value_model, batch, micro_batch_size,
                           lambda part: value_forward(value_model, part, compute_dtype, device), device)


def value_forward(value_model, batch: RolloutBatch, compute_dtype, device) -> torch.Tensor:
    """(B, R) values V(s_t) for the state before each response token (with grad)."""
    R = batch.response_mask.shape[1]
    with compute_context(value_model, compute_dtype, device):
        values = value_model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=position_ids(batch.attention_mask),
        )
    return values[:, -R - 1 : -1].float()
