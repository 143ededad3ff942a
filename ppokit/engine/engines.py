"""DeepSpeed engines for the trained models, and the trainer-facing backward/step contract.

The contract (`backward_and_step`, and `micro_batch_backward` which answers whether a step was applied): each micro-batch's loss arrives already normalised by the
global denominator of its mini-batch (ppokit.algos reduce: token or sequence counts of the whole
mini-batch over all ranks), so the correct gradient is the plain SUM over micro-batches and ranks.
DeepSpeed would instead (a) divide every loss by `gradient_accumulation_steps` and (b) average
gradients over data-parallel ranks. ppokit therefore calls `backward(loss, scale_wrt_gas=False)`
and multiplies the loss by the data-parallel world size, and it marks the last micro-batch of a
mini-batch explicitly, so a mini-batch may have any number of micro-batches. The optimizer
step (with gradient clipping and one LR-scheduler step) happens after the last one.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from ppokit.engine.schedule import make_lr_lambda


@contextlib.contextmanager
def native_linear_kept():
    """Inside: whatever swaps `torch.nn.functional.linear`, it is the same function after the block. DeepSpeed's
    ZeRO-3 (`zero.Init`, also run by `deepspeed.initialize` for a model not built under it) replaces it with its
    own for the rest of the process ("until manually reset"), so every later model in the process — a notebook's
    next run, a rollout — would compute other bits than alone. ZeRO-3 gathers the weights around each module's
    forward and backward with its own hooks; the native op is all it needs."""
    linear = torch.nn.functional.linear
    try:
        yield
    finally:
        torch.nn.functional.linear = linear


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

    with native_linear_kept():
        engine, *_ = deepspeed.initialize(
            model=model, model_parameters=params, config=ds_config, lr_scheduler=scheduler
        )
    if lone_allreduce_is_identity(engine):
        engine.enable_backward_allreduce = False
    return engine


def lone_allreduce_is_identity(engine) -> bool:
    """Whether DeepSpeed's gradient all-reduce after backward changes nothing: one data-parallel rank, ZeRO 0, no
    pipeline/sequence parallelism, no MoE, communication in the gradients' own dtype. It still flattens every
    gradient into one buffer, multiplies it by 1 / 1, all-reduces it over the one rank and copies it back — a
    540 MB round trip per optimizer step for a 135M model, 8 % of the update's CPU time on the bench
    (docs/performance.md) — so the engine skips it; the gradients are bit for bit the same
    (tests/engine/test_engine_deepspeed.py)."""
    grads_dtype = next((p.dtype for p in engine.module.parameters() if p.requires_grad), None)
    return (engine.dp_world_size == 1 and engine.zero_optimization_stage() == 0
            and not engine.pipeline_parallelism and getattr(engine, "sequence_parallel_size", 1) == 1
            and not engine.has_moe_layers and engine.communication_data_type in (None, grads_dtype))


def backward_and_step(engine, loss: torch.Tensor, *, last: bool, hint: str = "") -> float | None:
    """Backward one micro-batch's (globally normalised) loss; after the `last` one, step.

    loss: 0-d. A non-finite loss is refused (FloatingPointError naming it; `hint` says what to check).
    Returns the gradient norm before clipping after the `last` micro-batch, None before it.
    """
    if loss.dim() != 0:
        raise ValueError(f"micro_batch_backward needs a scalar loss, got shape {tuple(loss.shape)}.")
    if not torch.isfinite(loss.detach()).all():
        raise FloatingPointError(
            f"The loss is {loss.item()}; refusing to back-propagate it "
            f"({hint or 'check rewards, advantages and the learning rate'})."
        )
    engine.set_gradient_accumulation_boundary(last)
    # Global denominators make the per-rank losses sum to the batch loss; DeepSpeed averages
    # gradients over ranks, so scale back up by the data-parallel world size.
    engine.backward(loss * engine.dp_world_size, scale_wrt_gas=False)
    norm = pre_step_grad_norm(engine) if last else None
    engine.step()
    if last and norm is None:
        norm = float(engine.get_global_grad_norm() or 0.0)
    return norm


def micro_batch_backward(engine, loss: torch.Tensor, *, last: bool) -> bool:
    """`backward_and_step`; True when an optimizer update was applied (DeepSpeed may skip one on fp16
    overflow; see `engine.was_step_applied()`)."""
    backward_and_step(engine, loss, last=last)
    return bool(last and engine.was_step_applied())


def pre_step_grad_norm(engine) -> float | None:
    """The gradient norm before clipping, where DeepSpeed does not record it (ZeRO-0 without fp16 clips
    with torch and keeps no norm); None where `engine.get_global_grad_norm()` has it after the step."""
    if engine.zero_optimization_stage() != 0 or engine.fp16_enabled():
        return None
    norms = [p.grad.detach().float().norm() for p in engine.module.parameters() if p.grad is not None]
    return float(torch.stack(norms).norm()) if norms else 0.0


def current_lr(engine) -> float:
    """The learning rate the next optimizer update will use."""
    return float(engine.get_lr()[0])
