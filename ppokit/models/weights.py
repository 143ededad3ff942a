"""A trained model's weights under plain Hugging Face names, and plain copies built from them.

Used to hand the actor to a rollout engine (vLLM `load_weights`, the hf engine's low-precision
copy) and to start a critic from the actor. A peft LoRA model contributes its base weights with the
active adapters merged in (W + scaling·B·A, computed aside: the model is not modified); a ZeRO-3
model is gathered first (`gathered`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def gathered(model):
    """Gather ZeRO-3 partitioned parameters for reading (a no-op for ordinary modules)."""
    params = [p for p in model.parameters() if hasattr(p, "ds_id")]
    if not params:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)


def plain_model(model):
    """The transformers model inside `model` (peft wrapper removed; LoRA layers still inside)."""
    return model.get_base_model() if hasattr(model, "peft_config") else model


def hf_state(model) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of `model` as the plain HF model would name them (LoRA merged, no lora_*).

    Call inside `gathered(model)` for ZeRO-3 models.
    """
    if not hasattr(model, "peft_config"):
        yield from model.state_dict().items()
        return
    base = model.get_base_model()
    deltas: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in base.named_modules():
            if not (hasattr(module, "get_delta_weight") and hasattr(module, "base_layer")) or module.merged:
                continue
            for adapter in module.active_adapters:
                if adapter in getattr(module, "lora_A", {}):
                    delta = module.get_delta_weight(adapter)
                    key = f"{name}.weight"
                    deltas[key] = deltas[key] + delta if key in deltas else delta
        for name, tensor in base.state_dict().items():
            if "lora_" in name:
                continue
            clean = name.replace(".base_layer.", ".")
            if clean in deltas:
                tensor = tensor + deltas[clean].to(tensor.dtype)
            yield clean, tensor


def plain_copy(model, dtype: torch.dtype, auto_class: str = "AutoModelForCausalLM", prefix: str = ""):
    """A new plain transformers model (no peft, no DeepSpeed hooks, requires_grad False) in `dtype`
    holding `model`'s current weights.

    `auto_class` "AutoModel" with `prefix` "model." builds the base model (no LM head) from a
    causal LM, e.g. as a critic backbone.
    """
    import transformers

    source = plain_model(model)
    device = next(source.parameters()).device
    builder = getattr(transformers, auto_class)
    with torch.device(device):
        copy = builder.from_config(source.config, dtype=dtype)
    load_hf_state(copy, model, prefix=prefix)
    if hasattr(source, "generation_config") and hasattr(copy, "generation_config"):
        copy.generation_config = source.generation_config
    copy.requires_grad_(False)
    return copy


@torch.no_grad()
def load_hf_state(target, model, prefix: str = "") -> None:
    """Copy `model`'s weights (see `hf_state`; names starting with `prefix`, prefix stripped) into
    the parameters and buffers of `target`, casting to their dtype. Every tensor must match."""
    tensors = dict(target.named_parameters(remove_duplicate=False))
    tensors.update(dict(target.named_buffers(remove_duplicate=False)))
    seen = set()
    with gathered(model):
        for name, tensor in hf_state(model):
            if not name.startswith(prefix):
                continue
            name = name[len(prefix) :]
            if name not in tensors:
                raise KeyError(f"The copy has no tensor {name!r}; it must be built from the same architecture.")
            tensors[name].copy_(tensor)
            seen.add(name)
    missing = [n for n, _ in target.named_parameters() if n not in seen]
    if missing:
        raise KeyError(f"No weights for {missing[:5]} ({len(missing)} in all) in the source model.")
