"""The frozen reference policy for KL terms.

A reference is called exactly like the actor's causal LM — `ref(input_ids=..., attention_mask=...,
position_ids=..., logits_to_keep=..., use_cache=False).logits` — inside the caller's autocast, so
reference and actor log-probs come from the same code (`ReferencePolicy`). It never has gradients.

Without LoRA it is a second, frozen copy of the initial actor (eval mode, requires_grad False).
With LoRA it is the actor itself with its adapters switched off (peft's `disable_adapter()`): the
base weights never train, so that *is* the initial policy, at no extra memory.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from ppokit.models.loading import load_causal_lm


class ReferencePolicy(Protocol):
    training: bool

    def __call__(self, **model_inputs: Any) -> Any:
        """The causal-LM output (with `.logits`) for `model_inputs`, computed without gradients."""
        ...

    def eval(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...


class AdapterDisabledReference:
    """The LoRA actor with adapters disabled, run in eval mode and without gradients.

    The actor's own train/eval mode is restored after each call; `eval()`/`train()` on this
    view only record the mode asked for (the reference is always evaluated in eval mode).
    """

    def __init__(self, peft_model):
        if not hasattr(peft_model, "disable_adapter"):
            raise TypeError(
                "A LoRA reference needs the peft-wrapped actor (with disable_adapter()); "
                f"got {type(peft_model).__name__}. Pass the unwrapped actor module."
            )
        self.module = peft_model
        self.training = False

    def __call__(self, **model_inputs: Any) -> Any:
        was_training = self.module.training
        self.module.eval()
        try:
            with torch.no_grad(), self.module.disable_adapter():
                return self.module(**model_inputs)
        finally:
            self.module.train(was_training)

    def eval(self) -> AdapterDisabledReference:
        self.training = False
        return self

    def train(self, mode: bool = True) -> AdapterDisabledReference:
        self.training = mode
        return self


def freeze(model):
    """Eval mode and requires_grad False on every parameter; returns the model."""
    model.requires_grad_(False)
    return model.eval()


def load_reference(
    actor_model,
    path: str | None,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    lora_used: bool = False,
    attn_implementation: str | None = None,
) -> ReferencePolicy:
    """The reference policy for `actor_model`, which was loaded from `path`.

    Give the actor's `dtype` so the reference computes exactly as the actor (KL = 0 before the
    first update); its attention implementation is the actor's unless `attn_implementation` says otherwise
    (flash-attention and SDPA differ in the last bits, which would show as a KL at step 0). With `lora_used`,
    `actor_model` must be the unwrapped peft model and nothing is loaded. Without a `path` (an in-memory actor)
    the reference is a frozen plain copy of the actor.
    """
    if lora_used:
        return AdapterDisabledReference(actor_model)
    from ppokit.models.weights import plain_copy, plain_model

    attn_implementation = attn_implementation or getattr(plain_model(actor_model).config, "_attn_implementation", None)
    if path is None:
        copy = plain_copy(actor_model, dtype)
        if attn_implementation and attn_implementation != copy.config._attn_implementation:
            copy.set_attn_implementation(attn_implementation)
        return freeze(copy)
    model = load_causal_lm(path, dtype=dtype, device=device, attn_implementation=attn_implementation)
    return freeze(model)
