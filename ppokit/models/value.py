"""The PPO critic: a causal-LM backbone with a scalar value head.

`ValueModel(input_ids, attention_mask, position_ids=None) -> values (B, T)` float32: one value per
position. The backbone is the base model (`AutoModel`) of any causal-LM folder; the head is
`nn.Linear(hidden, 1)`, evaluated in float32 even under autocast. The head comes, in order of
preference, from `value_head.safetensors` in the folder (a ppokit-saved critic), from a reward
model's `score.weight` (PaddleNLP starts the critic from the reward model), or fresh and small.
Autocast is the caller's (as for the actor).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from ppokit.models.loading import enable_recompute, from_pretrained

HEAD_FILE = "value_head.safetensors"


class ValueModel(nn.Module):
    """Backbone + `value_head` (nn.Linear(hidden, 1))."""

    def __init__(self, backbone: nn.Module, head: nn.Linear):
        super().__init__()
        self.backbone = backbone
        self.value_head = head

    def forward(self, input_ids, attention_mask, position_ids=None) -> torch.Tensor:
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            head = self.value_head
            values = nn.functional.linear(hidden.float(), head.weight.float(), head.bias.float())
        return values.squeeze(-1)


def load_value_model(
    path: str | None,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    gradient_checkpointing: bool = False,
    attn_implementation: str | None = None,
    backbone: nn.Module | None = None,
    zero3_config: dict | None = None,
) -> ValueModel:
    """A critic whose backbone comes from the causal-LM (or reward-model) folder `path`, or — with
    `path=None` — a copy of the causal LM module `backbone` (e.g. the actor; LoRA merged). `zero3_config`: the
    critic engine's ZeRO-3 config, to load the backbone partitioned (`loading.from_pretrained`)."""
    if path is None:
        if backbone is None:
            raise ValueError("load_value_model needs a model folder (path) or a causal LM to copy (backbone).")
        from ppokit.models.weights import plain_copy, plain_model

        prefix = plain_model(backbone).base_model_prefix + "."
        base = plain_copy(backbone, dtype, auto_class="AutoModel", prefix=prefix).to(device)
        base.requires_grad_(True)
        if gradient_checkpointing:
            enable_recompute(base)
    else:
        base = from_pretrained("AutoModel", path, dtype, device, attn_implementation, gradient_checkpointing,
                               zero3_config)  # ZeRO-3: partitioned as it loads
    hidden = base.config.get_text_config().hidden_size
    head = nn.Linear(hidden, 1, dtype=dtype, device=device)
    state = _saved_head(path, hidden) if path is not None else None
    if state is None:
        nn.init.normal_(head.weight, mean=0.0, std=1.0 / (hidden + 1))
        nn.init.zeros_(head.bias)
    else:
        head.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    return ValueModel(base, head)


def save_value_model(model: ValueModel, out_dir: str | os.PathLike) -> None:
    """Write the backbone as a HF folder plus `value_head.safetensors` (reloadable by `load_value_model`).

    Under ZeRO-3 call it on every rank (gathering the weights is collective); only rank 0 writes.
    """
    from safetensors.torch import save_file

    from ppokit.models.folders import hf_state_dict

    out_dir = Path(out_dir)
    backbone, head = hf_state_dict(model.backbone), hf_state_dict(model.value_head)  # ZeRO-3: module by module
    if _rank() != 0:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    model.backbone.save_pretrained(out_dir, state_dict=backbone)
    save_file(head, str(out_dir / HEAD_FILE))


def _rank() -> int:
    from ppokit.engine import rank

    return rank()


@torch.no_grad()
def load_value_state(model: ValueModel, folder: str | os.PathLike) -> None:
    """Load a critic saved by `save_value_model` into an existing `ValueModel` (same architecture)."""
    from safetensors.torch import load_file
    from transformers import AutoModel

    folder = Path(folder)
    if not (folder / HEAD_FILE).is_file():
        raise FileNotFoundError(f"{folder} holds no {HEAD_FILE}; it was not written by save_value_model.")
    dtype = next(model.backbone.parameters()).dtype
    saved = AutoModel.from_pretrained(str(folder), dtype=dtype)
    from ppokit.models.folders import load_state_by_module  # ZeRO-3: written module by module, never whole

    for part, state in ((model.backbone, saved.state_dict()), (model.value_head, load_file(str(folder / HEAD_FILE)))):
        missing, unexpected = load_state_by_module(part, state)
        if missing or unexpected:
            raise ValueError(f"{folder}: the saved critic does not fit this model (missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}); resume with the same critic model")


def _saved_head(path: str, hidden: int) -> dict[str, torch.Tensor] | None:
    from safetensors import safe_open
    from safetensors.torch import load_file

    folder = Path(path)
    if (folder / HEAD_FILE).is_file():
        return load_file(str(folder / HEAD_FILE))
    for file in _safetensors_files(folder):
        with safe_open(str(file), framework="pt") as f:
            if "score.weight" not in f.keys():
                continue
            weight = f.get_tensor("score.weight")
            if tuple(weight.shape) != (1, hidden):
                return None
            bias = f.get_tensor("score.bias") if "score.bias" in f.keys() else torch.zeros(1)
            return {"weight": weight, "bias": bias}
    return None


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / n for n in names]
    return sorted(folder.glob("*.safetensors"))
