"""A trained module's weights in Hugging Face / peft folders: what checkpoints and `ppokit.export` write and read.

`save_hf` writes a plain HF folder (LoRA merged), `save_adapter` the LoRA adapters alone, and
`load_weights` loads either back into a module; all work under ZeRO-3 (collective, rank 0 writes).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from ppokit.engine import rank
from ppokit.errors import PpokitError


class WeightsError(PpokitError, ValueError):
    """Saved weights that are missing or do not fit the module they are loaded into."""




def hf_state_dict(module) -> dict[str, torch.Tensor] | None:
    """`module`'s weights under plain HF names (LoRA merged) on the CPU, on rank 0; None elsewhere.

    Collective under ZeRO-3 (every rank must call it): the weights are gathered one module at a time
    (`hf_state_by_module`) and copied to rank 0's CPU memory, so no GPU ever holds more than one module's full
    weights on top of its shard (gathering everything at once needs the whole float32 model on every GPU: 28 GB
    for 7B, more than the shards and optimizer state of a run that needed ZeRO-3). Tied weights (embeddings / LM
    head) stay one tensor.
    """
    from ppokit.models.weights import hf_state_by_module, plain_model

    aliases = tied_names(plain_model(module))
    state: dict[str, torch.Tensor] | None = {} if rank() == 0 else None
    for pairs in hf_state_by_module(module):  # every rank walks every module: the gathers are collective
        if state is None:
            continue
        for name, tensor in pairs:
            first = aliases.get(name)
            state[name] = state[first] if first in state else tensor.detach().to("cpu", copy=True).contiguous()
    return state


def tied_names(model) -> dict[str, str]:
    """{name: first name} for every parameter reachable under more than one (HF) name, e.g. a tied LM head."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        name = name.replace(".base_layer.", ".")
        out[name] = first.setdefault(id(param), name)
    return {k: v for k, v in out.items() if k != v}


def save_hf(module, tokenizer, out: str | os.PathLike) -> None:
    """Write `module` (plain, peft LoRA or ZeRO-3 partitioned) as a plain HF folder at `out`.

    Call it on every rank; rank 0 writes. LoRA adapters are merged into the saved weights; the
    module itself is left unchanged.
    """
    from ppokit.models.weights import plain_model

    state = hf_state_dict(module)
    if state is None:
        return
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plain_model(module).save_pretrained(out, state_dict=state, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def partitioned(module) -> bool:
    return any(hasattr(p, "ds_id") for p in module.parameters())


def adapter_params(module) -> list:
    """The parameters a peft adapter folder holds (LoRA matrices, `modules_to_save` copies), not the frozen base."""
    return [p for name, p in module.named_parameters() if "lora_" in name or "modules_to_save" in name]


def writable(params: list):
    """A context in which these (possibly ZeRO-3 partitioned) parameters can be overwritten (rank 0's win)."""
    if not any(hasattr(p, "ds_id") for p in params):
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(params, modifier_rank=0)


@torch.no_grad()
def load_state_by_module(module, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """(missing, unexpected) of `module.load_state_dict(state, strict=False)`, written one module at a time: under
    ZeRO-3 only that module's parameters are gathered (collective: call on every rank), never the whole model."""
    if not partitioned(module):
        result = module.load_state_dict(state, strict=False)
        return list(result.missing_keys), list(result.unexpected_keys)
    import deepspeed

    used: set[str] = set()
    missing: list[str] = []
    for name, sub in module.named_modules():
        prefix = f"{name}." if name else ""
        own = dict(sub.named_parameters(recurse=False))
        own.update((k, b) for k, b in sub.named_buffers(recurse=False) if k not in sub._non_persistent_buffers_set)
        if not own:
            continue
        params = [p for p in own.values() if hasattr(p, "ds_id")]
        with deepspeed.zero.GatheredParameters(params, modifier_rank=0):
            for key, tensor in own.items():
                if prefix + key in state:
                    tensor.copy_(state[prefix + key])
                    used.add(prefix + key)
                else:
                    missing.append(prefix + key)
    return missing, [k for k in state if k not in used]


def save_adapter(module, out: Path) -> None:
    """The LoRA adapters (peft layout); collective under ZeRO-3 (only the adapters are gathered, they are small;
    the frozen base is not: it would be the whole model on every GPU), rank 0 writes."""
    from ppokit.models.weights import gathered_params

    with gathered_params(adapter_params(module)):
        if rank() == 0:
            module.save_pretrained(str(out), safe_serialization=True)


def load_weights(module, folder: Path) -> None:
    """Load weights saved by `save_hf` (plain model) or `save_adapter` (LoRA) from `folder` into `module`."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WeightsError(f"{folder} holds no *.safetensors weights; the checkpoint is damaged")
    state = {}
    for f in files:
        state.update(load_file(f))
    if hasattr(module, "peft_config"):
        from peft import set_peft_model_state_dict

        with writable(adapter_params(module)):  # adapters are small: gathered at once, the base is not
            result = set_peft_model_state_dict(module, state)
        if result.unexpected_keys:
            raise WeightsError(f"{folder}: adapter weights {result.unexpected_keys[:5]} do not fit this model")
        return
    missing, unexpected = load_state_by_module(module, state)
    tied = set(getattr(module, "_tied_weights_keys", None) or ()) | {"lm_head.weight"}
    real_missing = [k for k in missing if k not in tied]
    if real_missing or unexpected:
        raise WeightsError(f"{folder}: weights do not fit this model (missing {real_missing[:5]}, "
                          f"unexpected {unexpected[:5]}); resume with the same actor_model_name_or_path")
