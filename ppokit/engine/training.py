"""DeepSpeed engines for the trained models, and the trainer-facing backward/step contract.

The contract (`micro_batch_backward`): each micro-batch's loss arrives already normalised by the
global denominator of its mini-batch (ppokit.algos reduce: token or sequence counts of the whole
mini-batch over all ranks), so the correct gradient is the plain SUM over micro-batches and ranks.
DeepSpeed would instead (a) divide every loss by `gradient_accumulation_steps` and (b) average
gradients over data-parallel ranks. ppokit therefore calls `backward(loss, scale_wrt_gas=False)`
and multiplies the loss by the data-parallel world size, and it marks the last micro-batch of a
mini-batch explicitly, so a mini-batch may have any number of micro-batches. The optimizer
step (with gradient clipping and one LR-scheduler step) happens after the last one.
"""

from __future__ import annotations

import torch
from torch import nn

from ppokit.engine.schedule import make_lr_lambda


def build_engine(model: nn.Module, ds_config: dict, lr_schedule: dict | None = None):
    """`deepspeed.initialize` for `model` with `ds_config` (from `deepspeed_config`).

    `lr_schedule`: keyword arguments of `make_lr_lambda` (kind, total_steps, warmup_steps, min_lr,
    ...; `lr`, if given, must equal the config's); None keeps the LR constant. The optimizer comes
    from the config (AdamW); only parameters with requires_grad are optimised (LoRA adapters,
    value head ...).
    Call `ppokit.engine.init_distributed()` first.
    """
    import deepspeed

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"{type(model).__name__} has no trainable parameters; nothing to optimise.")
    schedule = dict(lr_schedule or {"kind": "constant", "total_steps": 1, "warmup_steps": 0})
    lr = ds_config["optimizer"]["params"]["lr"]
    if schedule.pop("lr", lr) != lr:
        raise ValueError("lr_schedule['lr'] differs from the DeepSpeed config's learning rate; pass one value.")
    lr_lambda = make_lr_lambda(lr=lr, **schedule)

    def scheduler(optimizer):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

    engine, *_ = deepspeed.initialize(
        model=model, model_parameters=params, config=ds_config, lr_scheduler=scheduler
    )
    return engine


def micro_batch_backward(engine, loss: torch.Tensor, *, last: bool) -> bool:
    """Backward one micro-batch's (globally normalised) loss; after the `last` one, step.

    Returns True when an optimizer update was applied (DeepSpeed may skip one on fp16 overflow;
    see `engine.was_step_applied()`).
    """
    if loss.dim() != 0:
        raise ValueError(f"micro_batch_backward needs a scalar loss, got shape {tuple(loss.shape)}.")
    if not torch.isfinite(loss.detach()).all():
        raise FloatingPointError(
            f"The loss is {loss.item()}; refusing to back-propagate it (check rewards, advantages and the learning rate)."
        )
    engine.set_gradient_accumulation_boundary(last)
    engine.backward(loss * engine.dp_world_size, scale_wrt_gas=False)
    engine.step()
    return bool(last and engine.was_step_applied())


def unwrap(engine_or_model) -> nn.Module:
    """The plain module inside a DeepSpeed engine (or the argument itself)."""
    is_engine = hasattr(engine_or_model, "module") and hasattr(engine_or_model, "global_steps")
    return engine_or_model.module if is_engine else engine_or_model


def current_lr(engine) -> float:
    """The learning rate the next optimizer update will use."""
    return float(engine.get_lr()[0])
