"""`to_model_device`: the one way a tensor the trainer feeds a model reaches that model's device.

Batches are built and kept on the CPU (rewards, advantages and metrics are computed there); each micro-batch is
moved once, just before its forward, and what the trainer stores back on the batch comes back to the CPU. Neither
DeepSpeed's engine nor transformers moves inputs, so a tensor left behind fails on a GPU with "Expected all tensors
to be on the same device" (tests/training/test_device_discipline.py shows every path on a pretend device).
"""

from __future__ import annotations

import dataclasses

import torch


def to_model_device(value, device):
    """`value` with every tensor on `device`: a tensor, a tuple/list/dict of them, or a dataclass (a RolloutBatch)
    whose tensor fields and dicts of tensors are moved; other values are kept as they are (not copied). A value
    already there is returned as is (`Tensor.to` does not copy then)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(to_model_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_model_device(v, device) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        moved = {f.name: to_model_device(getattr(value, f.name), device) for f in dataclasses.fields(value)
                 if isinstance(getattr(value, f.name), (torch.Tensor, dict))}
        return dataclasses.replace(value, **moved)
    return value
