"""A trained model's weights under plain Hugging Face names, and plain copies built from them.

Used to hand the actor to a rollout engine (vLLM `load_weights`, the hf engine's low-precision
copy) and to start a critic from the actor. A peft LoRA model contributes its base weights with the
active adapters merged in (W + scaling·B·A, computed aside: the model is not modified); a ZeRO-3
model is gathered one module at a time (`hf_state_by_module`), never whole: docs/scaling.md promises that no GPU
holds the full weights of a ZeRO-3 model (`gathered`, the whole model at once, is for tests and small models).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def gathered(model):
    """Gather ZeRO-3 partitioned parameters for reading (a no-op for ordinary modules)."""
    return gathered_params(list(model.parameters()))


def plain_model(model):
    """The transformers model inside `model` (peft wrapper removed; LoRA layers still inside)."""
    return model.get_base_model() if hasattr(model, "peft_config") else model


def _is_lora_layer(module) -> bool:
    return hasattr(module, "get_delta_weight") and hasattr(module, "base_layer")


def _lora_delta(module) -> torch.Tensor | None:
    """W delta of a peft LoRA layer's active, unmerged adapters (sum of scaling·B·A), or None."""
    if not _is_lora_layer(module) or module.merged:
        return None
    delta = None
    for adapter in module.active_adapters:
        if adapter in getattr(module, "lora_A", {}):
            d = module.get_delta_weight(adapter)
            delta = d if delta is None else delta + d
    return delta


def hf_state_by_module(model) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """`hf_state(model)` one module at a time, ZeRO-3 gathering only that module's parameters.

    Yields, per module that owns tensors (a peft LoRA layer counts as one module, its adapters merged
    in), the list of its (HF name, tensor) pairs; the tensors are valid until the next item is
    requested (under ZeRO-3 the module is re-partitioned then). Nothing is copied to the CPU: peak
    extra memory is one module's gathered parameters (plus its LoRA delta). Persistent buffers are
    included, as in `state_dict`.
    """
    base = plain_model(model)
    inside_lora: list[str] = []
    for name, module in base.named_modules():
        if any(name.startswith(p + ".") for p in inside_lora):
            continue
        if _is_lora_layer(module):
            inside_lora.append(name)
            params = list(module.parameters())
        else:
            params = list(module.parameters(recurse=False))
        if not params and not _persistent_buffers(module):
            continue
        with gathered_params(params):
            yield _module_tensors(name, module)


def _persistent_buffers(module) -> list[tuple[str, torch.Tensor]]:
    return [(k, b) for k, b in module.named_buffers(recurse=False) if k not in module._non_persistent_buffers_set]


@torch.no_grad()
def _module_tensors(name: str, module) -> list[tuple[str, torch.Tensor]]:
    """(HF name, detached tensor) of one module's own parameters and persistent buffers; a LoRA layer gives its
    base layer's, with the adapters' delta added to the weight."""
    prefix = f"{name}." if name else ""
    delta = _lora_delta(module)
    owner = module.base_layer if _is_lora_layer(module) else module
    out = []
    for key, tensor in owner.named_parameters(recurse=False):
        if key == "weight" and delta is not None:
            tensor = tensor + delta.to(tensor.dtype)
        out.append((prefix + key, tensor.detach()))
    return out + [(prefix + k, b) for k, b in _persistent_buffers(owner)]


def gathered_params(params: list):
    """Gather these ZeRO-3 partitioned parameters for reading (a no-op for ordinary ones)."""
    partitioned = [p for p in params if hasattr(p, "ds_id")]
    if not partitioned:
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None)


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
            delta = _lora_delta(module)
            if delta is not None:
                deltas[f"{name}.weight"] = delta
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
    import copy as copying

    import transformers

    source = plain_model(model)
    device = next(source.parameters()).device
    builder = getattr(transformers, auto_class)
    with torch.device(device):  # its own config: changing the copy's (e.g. its attention) leaves the source's alone
        copy = builder.from_config(copying.deepcopy(source.config), dtype=dtype)
    load_hf_state(copy, model, prefix=prefix)
    if hasattr(source, "generation_config") and hasattr(copy, "generation_config"):
        copy.generation_config = source.generation_config
    copy.requires_grad_(False)
    return copy


@torch.no_grad()
def load_hf_state(target, model, prefix: str = "") -> None:
    """Copy `model`'s weights (see `hf_state`; names starting with `prefix`, prefix stripped) into
    the parameters and buffers of `target`, casting to their dtype. Every tensor must match.

    Under ZeRO-3 `model` is gathered one module at a time (collective: every rank calls it), so the extra memory is
    one module's weights on top of the shard, not the model."""
    tensors = dict(target.named_parameters(remove_duplicate=False))
    tensors.update(dict(target.named_buffers(remove_duplicate=False)))
    seen = set()
    for pairs in hf_state_by_module(model):
        for name, tensor in pairs:
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
