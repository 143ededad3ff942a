"""The PPO critic: a causal-LM backbone with a scalar value head.

`ValueModel(input_ids, attention_mask) -> values (B, T)`: one value per position (the value of the
state after token t). The backbone is the base model (`AutoModel`) of any causal-LM folder; the head
is `nn.Linear(hidden, 1)`. The head is initialised, in order of preference, from
`value_head.safetensors` in the folder (a ppokit-saved critic), from a reward model's `score.weight`
(PaddleNLP initialises the critic from the reward model), or fresh with small weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from ppokit.models.loading import autocast_context

HEAD_FILE = "value_head.safetensors"


class ValueModel(nn.Module):
    """Backbone + `value_head` (nn.Linear(hidden, 1)); forward returns float32 values (B, T)."""

    def __init__(self, backbone: nn.Module, head: nn.Linear, compute_dtype: torch.dtype = torch.float32):
        super().__init__()
        self.backbone = backbone
        self.value_head = head
        self.compute_dtype = compute_dtype

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with autocast_context(self.compute_dtype, input_ids.device):
            hidden = self.backbone(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
            values = self.value_head(hidden)
        return values.squeeze(-1).float()


def load_value_model(
    path: str,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    gradient_checkpointing: bool = False,
    compute_dtype: torch.dtype = torch.float32,
    attn_implementation: str | None = None,
) -> ValueModel:
    """A critic whose backbone comes from the causal-LM (or reward-model) folder `path`."""
    from transformers import AutoModel

    kwargs = {"dtype": dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    backbone = AutoModel.from_pretrained(path, **kwargs)
    if gradient_checkpointing:
        backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    hidden = backbone.config.get_text_config().hidden_size
    head = nn.Linear(hidden, 1, dtype=dtype)
    state = _saved_head(path, hidden)
    if state is None:
        nn.init.normal_(head.weight, mean=0.0, std=1.0 / (hidden + 1))
        nn.init.zeros_(head.bias)
    else:
        head.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    return ValueModel(backbone, head, compute_dtype).to(device)


def save_value_model(model: ValueModel, out_dir: str | os.PathLike) -> None:
    """Write the backbone as a HF folder plus `value_head.safetensors` (reloadable by `load_value_model`)."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.backbone.save_pretrained(out_dir)
    state = {k: v.detach().cpu().contiguous() for k, v in model.value_head.state_dict().items()}
    save_file(state, str(out_dir / HEAD_FILE))


def _saved_head(path: str, hidden: int) -> dict[str, torch.Tensor] | None:
    from safetensors import safe_open
    from safetensors.torch import load_file

    folder = Path(path)
    if (folder / HEAD_FILE).is_file():
        return load_file(str(folder / HEAD_FILE))
    for file in _safetensors_files(folder):
        with safe_open(str(file), framework="pt") as f:
            if "score.weight" in f.keys():
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
