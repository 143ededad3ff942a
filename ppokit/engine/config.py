"""The one place ppokit's DeepSpeed configuration is generated.

Precision (docs/performance.md, "One precision path"): trainable weights, gradients and optimizer state are
float32; a bf16 run computes its forwards in bf16 through DeepSpeed's own `torch_autocast` section, which enters
`torch.autocast(<accelerator>, bfloat16)` inside `engine.forward` the same way on a CPU and on CUDA. An autocast
around `engine(...)` would not do: DeepSpeed switches an outer autocast off inside its forward when its own section
is off, and it sees the outer one only on CUDA (`torch.is_autocast_enabled()` reads the CUDA flag), so the training
forward ran float32 on a GPU and bf16 on a CPU. `lower_precision_safe_modules` is empty: DeepSpeed would otherwise
all-reduce those modules' gradients and all-gather their ZeRO-3 shards in bf16, rounding the float32 weights every
gather (saves, weight syncs) reads. DeepSpeed's bf16 section (bf16 weights, float32 master copies in the optimizer)
is not used: the module's weights would be bf16, so checkpoints, the reference and the rollout would see rounded
weights and saved folders would change format. fp16 is only used on CUDA, through DeepSpeed's fp16 mode with
dynamic loss scaling.

Optimizer: AdamW with PaddleNLP's keys (learning_rate, adam_beta1/2, adam_epsilon, weight_decay,
max_grad_norm → gradient_clipping). Without offload it is torch's fused `torch.optim.AdamW`
("torch_adam": true, "fused": true), so nothing is compiled on first use; with optimizer offload DeepSpeed's
CPU Adam is used, which DeepSpeed compiles with the system compiler the first time.
"""

from __future__ import annotations

import json
import logging

import torch

log = logging.getLogger("ppokit")


def autocast_section(dtype: torch.dtype) -> dict:
    """DeepSpeed's `torch_autocast` section for forwards in `dtype` over float32 weights: nothing DeepSpeed
    communicates (gradients, ZeRO-3 shards) is cast to it."""
    return {"enabled": True, "dtype": str(dtype).removeprefix("torch."), "lower_precision_safe_modules": []}


def zero_settings(sharding, offload_level="") -> tuple[int, bool]:
    """PaddleNLP's `sharding` ("stage1" | "stage2" | "stage3", optionally with "offload"; a string
    or a list) and `offload_level` (space-separated; "optimizer" offloads the optimizer) →
    (ZeRO stage, offload optimizer to CPU).

    Unlike PaddleNLP, which ignores sharding in a single-process run, the stage is kept as asked:
    ZeRO with one process is valid and optimizer offload still saves accelerator memory.
    """
    words = _words(sharding)
    stages = [int(w[len("stage") :]) for w in words if w.startswith("stage") and w[len("stage") :].isdigit()]
    unknown = [w for w in words if w != "offload" and not (w.startswith("stage") and w[5:] in {"1", "2", "3"})]
    if unknown:
        raise ValueError(
            f"sharding {sharding!r} has unknown part(s) {unknown}; use 'stage1', 'stage2' or 'stage3', "
            "optionally followed by 'offload'."
        )
    offload = "offload" in words or "optimizer" in _words(offload_level)
    return (max(stages) if stages else 0), offload


def _words(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.replace(",", " ").split()
    return [w for item in value for w in str(item).replace(",", " ").split()]


def deepspeed_config(
    *,
    zero_stage: int,
    offload_optimizer: bool,
    micro_batch_size: int,
    grad_accum: int,
    world_size: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    max_grad_norm: float = 1.0,
    fp16: bool = False,
    compute_dtype: torch.dtype | None = None,
    device="cpu",
) -> dict:
    """A DeepSpeed config dict for one trained model (actor or critic); logged once as JSON.

    `compute_dtype`: the dtype the forwards compute in (`ppokit.models.dtype_for`'s second value: bf16 only where
    the device multiplies bf16 fast); bfloat16 turns on the `torch_autocast` section (see the module docstring).
    `fp16` turns on DeepSpeed's fp16 mode on CUDA only (float16 weights: the engine computes in them without
    autocast).

    `grad_accum` is the number of micro-batches per optimizer step on each rank; ppokit sets the
    accumulation boundary itself (see `ppokit.engine.backward_and_step`), so this only has to
    be consistent with `train_batch_size`.
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero_stage}.")
    on_cuda = torch.device(device).type == "cuda"
    if offload_optimizer and not on_cuda:
        log.info("offloading the optimizer to CPU has no effect when training on %s; not offloading", device)
        offload_optimizer = False
    if offload_optimizer and zero_stage == 0:
        log.info("optimizer offload needs ZeRO; using ZeRO stage 1 for it")
        zero_stage = 1
    zero: dict = {"stage": zero_stage}
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    params = {"lr": lr, "betas": list(betas), "eps": eps, "weight_decay": weight_decay}
    if not offload_optimizer:
        # torch's fused AdamW: one kernel over each parameter instead of a dozen foreach passes over all of
        # them; measured 1.5-2.2 s -> 0.2-0.35 s per step for 27M parameters on the loaded 2-core CPU.
        params.update(torch_adam=True, fused=True)
    config = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": grad_accum,
        "train_batch_size": micro_batch_size * grad_accum * world_size,
        "gradient_clipping": max_grad_norm if max_grad_norm and max_grad_norm > 0 else 0.0,
        "optimizer": {"type": "AdamW", "params": params},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    if fp16 and on_cuda:
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    elif compute_dtype == torch.bfloat16:
        config["torch_autocast"] = autocast_section(compute_dtype)
    log.debug("DeepSpeed config: %s", json.dumps(config, sort_keys=True))  # shown with --log_level debug
    return config
