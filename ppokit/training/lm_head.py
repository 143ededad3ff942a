"""The LM head applied chunk by chunk to the response tokens' hidden states.

A forward of a causal LM builds the (tokens x vocabulary) logits of every kept position at once: 8 x 2048 response
tokens x 151,936 (Qwen2) x 4 bytes is ~10 GB per micro-batch, plus its gradient. Here the model's forward runs with
its LM head passed through (`head_skipped`: its output is the final hidden states), and `chunked_head_logprobs`
runs the head on `chunk_size` tokens at a time, each chunk under activation checkpointing when a gradient is
needed, so at most one chunk's (chunk x V) logits exist at once, in forward and in backward.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

import torch
from torch.utils.checkpoint import checkpoint

from ppokit.algos.embedding_grad import kept_grad_embedding
from ppokit.algos.head_logprobs import head_logprobs
from ppokit.algos.logprobs import _chunk_entropy, _chunk_logprobs, _chunk_logprobs_entropy
from ppokit.models.forwards import forwards_replaced
from ppokit.models.loading import KNOWN_DECODER_TYPES, autocast_context

# config attributes of families whose forward changes the logits after the head (soft-capping, scaling)
_AFTER_HEAD = ("final_logit_softcapping", "logit_scale", "logits_scaling")
# head module -> {thread: its kept logits buffers} (head_logprobs' workspace): freed with the model, never shared
# between threads
_workspaces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def split_head(model):
    """The LM head module of `model` (a DeepSpeed engine, a peft wrapper or a transformers causal LM) when the
    logits are exactly `head(hidden_states)` (a known decoder family with nothing applied after the head), else
    None (the forward then builds the logits itself)."""
    module = getattr(model, "module", model)
    base = module.get_base_model() if hasattr(module, "peft_config") else module
    config = getattr(base, "config", None)
    if getattr(config, "model_type", None) not in KNOWN_DECODER_TYPES:
        return None
    if any(getattr(config, key, None) not in (None, 1, 1.0) for key in _AFTER_HEAD):
        return None
    head = getattr(base, "lm_head", None)
    return head if isinstance(head, torch.nn.Linear) or hasattr(head, "base_layer") else None


@contextlib.contextmanager
def head_skipped(head):
    """Inside: `head(x)` returns x (the model's "logits" are its final hidden states); a no-op for None. The head's
    module hooks (ZeRO-3's gather) still run; only its computation is skipped."""
    if head is None:
        yield
        return
    with forwards_replaced({head: _identity}):
        yield


def fusable(head, entropy: str) -> bool:
    """Whether `head` runs as one fused product + log-softmax (`algos.head_logprobs`): a plain bias-free Linear
    with no hooks (ZeRO-3's gather, a user's) and no adapter, and an entropy without gradient."""
    return (type(head) is torch.nn.Linear and head.bias is None and entropy in ("none", "detached")
            and not (head._forward_hooks or head._forward_pre_hooks or hasattr(head.weight, "ds_id")))


def _identity(x, *args, **kwargs):
    return x


def _workspace(module) -> dict:
    return _workspaces.setdefault(module, {}).setdefault(threading.get_ident(), {})


@contextlib.contextmanager
def tied_embedding_gradient_kept(model, head):
    """Inside, on a CPU, the input embedding tied to `head` builds its weight gradient in a kept buffer
    (`algos.embedding_grad`): autograd adds it into the head's gradient in place instead of mapping a fresh
    (V, H) tensor each backward. Only for a plain `nn.Embedding` (no max_norm, no sparse or frequency-scaled
    gradient, no hooks) whose weight is `head.weight`, while a gradient is recorded; elsewhere a no-op."""
    module = getattr(model, "module", model)
    base = module.get_base_model() if hasattr(module, "peft_config") else module
    embedding = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    weight = getattr(head, "weight", None)
    if (type(embedding) is not torch.nn.Embedding or weight is None or embedding.weight is not weight
            or not torch.is_grad_enabled() or not weight.requires_grad or weight.device.type != "cpu"
            or embedding.max_norm is not None or embedding.sparse or embedding.scale_grad_by_freq
            or embedding._forward_hooks or embedding._forward_pre_hooks or hasattr(weight, "ds_id")):
        yield
        return
    workspace = _workspace(embedding)
    with forwards_replaced({embedding: lambda ids: kept_grad_embedding(ids, embedding.weight, embedding.padding_idx,
                                                                        workspace)}):
        yield


def chunked_head_logprobs(head, hidden: torch.Tensor, labels: torch.Tensor, chunk_size: int, entropy: str,
                          temperature: float, compute_dtype, device):
    """(log-probs (1, N), entropies (1, N) or None) of `labels` (1, N) under softmax(head(hidden) / temperature),
    hidden (1, N, H), the head run on `chunk_size` rows at a time under the run's compute autocast.

    entropy: "grad" (differentiable), "detached" (no gradient) or "none". Equal to the log-probs of the
    full logits up to the rounding of a matmul split into row blocks (tests/training/test_lm_head_chunks.py).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if fusable(head, entropy):
        workspace = _workspace(head)
        logp, ent = head_logprobs(hidden[0], head.weight, labels[0].clamp_min(0).long(), temperature,
                                  entropy == "detached", compute_dtype, chunk_size, workspace)
        return logp[None].masked_fill(labels < 0, 0.0), None if ent is None else ent[None]
    needs_grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))

    def one(h, y):
        with autocast_context(compute_dtype, device):
            logits = head(h)
        if entropy == "detached":
            return _chunk_logprobs_entropy(logits, y, temperature)
        logp = _chunk_logprobs(logits, y, temperature)
        return (logp, _chunk_entropy(logits, temperature)) if entropy == "grad" else (logp, None)

    safe = labels.clamp_min(0).long()
    pieces = []
    for s in range(0, hidden.shape[1], chunk_size):
        h, y = hidden[:, s : s + chunk_size], safe[:, s : s + chunk_size]
        # The head draws no random numbers, so the recompute need not save and restore the global RNG (which would
        # also roll back the draws a producer thread makes meanwhile: async_producer=thread). Its metadata check is
        # off too: a pure matmul + log-softmax recomputes what it computed (and the check misreads the CPU tests'
        # pretend GPU, tests/training/device_tags.py).
        pieces.append(checkpoint(one, h, y, use_reentrant=False, preserve_rng_state=False,
                                 determinism_check="none") if needs_grad
                      else one(h, y))
    if not pieces:
        empty = hidden.new_zeros(labels.shape, dtype=torch.float32)
        return empty, (None if entropy == "none" else empty.clone())
    logp = torch.cat([p[0] for p in pieces], dim=1).masked_fill(labels < 0, 0.0)
    ent = None if entropy == "none" else torch.cat([p[1] for p in pieces], dim=1)
    return logp, ent
