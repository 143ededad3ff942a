"""A pretend accelerator for CPU-only torch: `OnDevice(model)` makes `model` live on "cuda:0" as far as the code
under test can tell, and refuses what a real GPU refuses, an op that mixes tensors of two devices.

Every tensor carries a tag: on the pretend device or not. The model's parameters are tagged; so is everything an op
computes from a tagged tensor, and everything created or moved with `device=`/`.to(...)` naming cuda (the tensor
itself stays on the CPU, so the computation is real and differentiable). `tensor.device` answers "cuda:0" for a
tagged tensor, so code that takes its device from an input (`torch.arange(n, device=x.device)`) gets a tagged tensor,
and code that does not (`torch.zeros(n)`) gets an untagged one, as on a GPU. An op whose tensor arguments are both
tagged and untagged raises `DeviceMismatch`, except where torch itself allows some mixing: untagged 0-d tensors
(CPU scalars) are never counted, and indexing (`[]`, `[]=`, `index_put_`) and `copy_` are not checked (torch
accepts CPU indices and copies across devices there; this mode is the more lenient one for them).

FakeTensorMode(device="cuda") checks the same for small pieces, but aborts inside a whole transformers forward; this
runs a whole forward, loss and backward.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

PRETEND = torch.device("cuda", 0)
CPU = torch.device("cpu")
TAG = "_pretend_cuda"
# ops where torch allows a device tensor with tensors (indices, sources) on the CPU
CROSS_DEVICE_OK = {"copy_", "__getitem__", "__setitem__", "index_put_"}


class DeviceMismatch(RuntimeError):
    """What CUDA raises as "Expected all tensors to be on the same device"."""


def tagged(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, TAG, False)


def tag(t: torch.Tensor, on: bool = True) -> torch.Tensor:
    setattr(t, TAG, on)
    return t


def is_pretend(device) -> bool:
    if isinstance(device, int) and not isinstance(device, bool):
        return True  # .to(0): a CUDA ordinal
    if isinstance(device, (str, torch.device)):
        try:
            return torch.device(device).type == "cuda"
        except RuntimeError:
            return False
    return False


def is_device(value) -> bool:
    if isinstance(value, torch.device):
        return True
    if isinstance(value, str):
        try:
            torch.device(value)
            return True
        except RuntimeError:
            return False
    return False


def _getter_name(func) -> str | None:
    owner = getattr(func, "__self__", None)
    if getattr(func, "__name__", None) == "__get__" and owner is not None:
        return getattr(owner, "__name__", None)
    return None


def _target(name: str, args, kwargs) -> str | None:
    """'pretend', 'cpu' or None (no device named) for the device this call puts its result on."""
    if name == "cuda":
        return "pretend"
    if name == "cpu":
        return "cpu"
    found = [kwargs["device"]] if kwargs.get("device") is not None else []
    if name == "to":
        found += [a for a in args[1:] if is_device(a) or (isinstance(a, int) and not isinstance(a, bool))]
        found += [("pretend" if tagged(a) else "cpu") for a in args[1:] if isinstance(a, torch.Tensor)]
    if not found:
        return None
    d = found[0]
    return d if d in ("pretend", "cpu") else ("pretend" if is_pretend(d) else "cpu")


def _is_ordinal(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _to_arg(value):
    """An argument of `Tensor.to` with the pretend device made the CPU (`.to(other)` means other's dtype too)."""
    return value.dtype if isinstance(value, torch.Tensor) else _strip(value)


def _strip(value):
    """The same argument with every cuda device replaced by the CPU (where the work really happens)."""
    if is_pretend(value) and not isinstance(value, int):
        return CPU
    return value


class OnDevice(TorchFunctionMode):
    """`with OnDevice(model):` the model's parameters and buffers live on the pretend "cuda:0"."""

    def __init__(self, *modules):
        super().__init__()
        for m in modules:
            for t in list(m.parameters()) + list(m.buffers()):
                tag(t)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        getter = _getter_name(func)
        if getter == "device":
            return PRETEND if tagged(args[0]) else CPU
        if getter == "is_cuda":
            return tagged(args[0])
        if getter == "is_cpu":
            return not tagged(args[0])
        name = getattr(func, "__name__", "")
        if name == "get_device":
            return 0 if tagged(args[0]) else -1
        target = _target(name, args, kwargs)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if target is None and name not in CROSS_DEVICE_OK:
            self.check(func, tensors)
        if name == "to":
            args = (args[0],) + tuple(_to_arg(a) for a in args[1:] if not _is_ordinal(a))
        if name == "cuda":
            func, args, kwargs = torch.Tensor.view_as, (args[0], args[0]), {}
        args, kwargs = tree_map(_strip, args), {k: _strip(v) for k, v in kwargs.items()}
        out = func(*args, **kwargs)
        if target is not None and name in ("to", "cpu", "cuda") and out is args[0]:
            out = out.view_as(out)  # a move makes a new tensor on a real GPU; never re-tag the caller's
        on = target == "pretend" if target is not None else any(tagged(t) for t in tensors)
        if name in CROSS_DEVICE_OK and target is None:
            on = tagged(args[0]) if args and isinstance(args[0], torch.Tensor) else on
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                tag(t, on)
        return out

    @staticmethod
    def check(func, tensors) -> None:
        device = [t for t in tensors if tagged(t)]
        host = [t for t in tensors if not tagged(t) and t.dim() > 0]
        if device and host:
            shapes = [tuple(t.shape) for t in host]
            raise DeviceMismatch(f"Expected all tensors to be on the same device: {getattr(func, '__name__', func)} "
                                 f"got tensors on cuda:0 and CPU tensors of shapes {shapes}")


def host_tensors(value) -> list[str]:
    """Names of the tensor fields of a dataclass (e.g. a RolloutBatch) that are not on the pretend device."""
    from dataclasses import fields

    out = []
    for f in fields(value):
        v = getattr(value, f.name)
        items = v.items() if isinstance(v, dict) else [(f.name, v)]
        out += [k for k, t in items if isinstance(t, torch.Tensor) and not tagged(t)]
    return out
