"""The frozen reference policy for KL terms.

Without LoRA the reference is a second, frozen copy of the initial actor. With LoRA it is the actor
itself with its adapters switched off (peft's `disable_adapter()`): the base weights never train, so
that *is* the initial policy, at no extra memory.

Both kinds satisfy `ReferencePolicy`: `forward_logits(input_ids, attention_mask)` returns the
logits (B, T, V) under `torch.no_grad()` in eval mode; turning them into log-probs is the caller's
job (ppokit.algos), exactly as for the actor.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ppokit.models.loading import autocast_context, load_causal_lm


class ReferencePolicy(Protocol):
    def forward_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, V) of the reference policy for `input_ids` (B, T); no gradients."""
        ...


class FrozenReference:
    """A separate frozen model (eval mode, requires_grad False)."""

    def __init__(self, model, compute_dtype: torch.dtype = torch.float32):
        self.module = model.eval()
        self.module.requires_grad_(False)
        self.compute_dtype = compute_dtype

    @torch.no_grad()
    def forward_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        device = next(self.module.parameters()).device
        with autocast_context(self.compute_dtype, device):
            out = self.module(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.logits


class AdapterDisabledReference:
    """The LoRA actor with adapters disabled, run in eval mode (its train/eval mode is restored)."""

    def __init__(self, peft_model, compute_dtype: torch.dtype = torch.float32):
        if not hasattr(peft_model, "disable_adapter"):
            raise TypeError(
                "A LoRA reference needs the peft-wrapped actor (with disable_adapter()); "
                f"got {type(peft_model).__name__}. Pass the unwrapped actor module."
            )
        self.module = peft_model
        self.compute_dtype = compute_dtype

    @torch.no_grad()
    def forward_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        was_training = self.module.training
        device = next(self.module.parameters()).device
        self.module.eval()
        try:
            with self.module.disable_adapter(), autocast_context(self.compute_dtype, device):
                out = self.module(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        finally:
            self.module.train(was_training)
        return out.logits


def load_reference(
    actor_model,
    path: str,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    lora_used: bool = False,
    compute_dtype: torch.dtype = torch.float32,
    attn_implementation: str | None = None,
) -> ReferencePolicy:
    """The reference policy for `actor_model` (loaded from `path`).

    Give the actor's `dtype` and `compute_dtype` so that the reference computes exactly as the
    actor does (KL = 0 before the first update). With `lora_used`, `actor_model` must be the
    unwrapped peft model and nothing is loaded.
    """
    if lora_used:
        return AdapterDisabledReference(actor_model, compute_dtype)
    model = load_causal_lm(path, dtype=dtype, device=device, attn_implementation=attn_implementation)
    return FrozenReference(model, compute_dtype)
