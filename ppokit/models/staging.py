"""An actor that waits for its GPU without holding host RAM: built on the meta device (no storage) from its config,
its weights read straight onto the GPU once the rollout engine has started there.

Where a vLLM engine is about to start on the actor's GPU, the actor cannot be there yet (vLLM sizes itself from the
free memory). Staging it on the CPU instead held the float32 weights in host RAM on every rank: 4 bytes x
parameters, 28 GB per rank and 224 GB per node of 8 ranks for 7B (docs/scaling.md, host RAM). On the meta device
it holds nothing; `materialize` then loads the checkpoint with its tensors placed on the GPU directly (the
safetensors files are memory-mapped, so their pages sit once in the node's page cache, shared by its ranks), and
moves those tensors into the staged model in place: the same module objects, so whatever holds the model (the
rollout engine's weight sync) and whatever was set on it (dropout, recompute, the generation config's stop ids)
stays as it was.
"""

from __future__ import annotations

from pathlib import Path

import torch

META = torch.device("meta")


def load_on_meta(path: str, dtype: torch.dtype, attn_implementation: str | None):
    """The causal LM of folder `path` with every parameter and buffer on the meta device, its generation config
    read from the folder; `materialize` gives it its weights."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    config = AutoConfig.from_pretrained(path)
    with META:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    if Path(path, "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(path)
    model.ppokit_staged = (path, dtype, attn_implementation)
    return model


def is_staged(model) -> bool:
    return getattr(model, "ppokit_staged", None) is not None


def materialize(model, device) -> None:
    """Load the staged `model`'s checkpoint onto `device` and put its parameters and buffers into `model` in place
    (tied weights stay one parameter); a no-op for a model that is not staged."""
    if not is_staged(model):
        return
    from transformers import AutoModelForCausalLM

    path, dtype, attn_implementation = model.ppokit_staged
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    loaded = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, device_map=torch.device(device), **kwargs)
    model.load_state_dict(loaded.state_dict(keep_vars=True), assign=True)  # keep_vars: the tie is one Parameter
    persistent = set(loaded.state_dict())
    for name, buffer in loaded.named_buffers():  # non-persistent ones (rotary frequencies) are not in a state dict
        if name not in persistent:
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner)._buffers[leaf] = buffer
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"]
    if left:
        raise RuntimeError(f"{path}: the checkpoint gave no value for {left[:5]} ({len(left)} tensors)")
    model.ppokit_staged = None
