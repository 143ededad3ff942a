"""The linear layers of a decoding loop on a CPU: products shaped for the few rows of a decoding step.

Inside `decoding_linears(model)` every CPU `nn.Linear` of the model computes through one of two paths:
- float32 products (float32 weights, no lower-precision autocast): `skinny_linear`, the weight-major product over
  rows padded to what MKL's float32 kernels run fastest;
- bf16 autocast: `PackedLinears`, oneDNN's bf16 kernel on weights reordered once per `decode` call into the
  kernel's blocked layout (`F.linear` reorders the whole weight at every call), with the sibling projections that
  read the same input (q/k/v, gate/up) computed as one product. The same kernel gives the same bits for any
  row count, fused or not (tests/rollout/test_decode_linears.py); docs/performance.md, tenth pass, has the times.
Elsewhere (GPUs, fp16 autocast) the vendor's GEMM is left alone.
"""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.nn.functional as F

from ppokit.models.forwards import forwards_replaced

PACK_ROWS = 32  # the row count oneDNN lays a packed weight out for; any row count computes the same bits
FUSED_SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # children that read one input


def skinny_rows(rows: int) -> int:
    """Rows to pad a decoding step's few rows to for the weight-major product: MKL's float32 kernels run it
    1.2-3x faster at 4 and at multiples of 16 rows than at the sizes in between (docs/performance.md).
    0 means: leave these rows to `F.linear` (5-8 rows, where padding to 16 costs more than it saves)."""
    if rows <= 2:
        return rows
    if rows <= 4:
        return 4
    return 0 if rows <= 8 else -(-rows // 16) * 16


def skinny_linear(module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`module(x)` for the few rows of a CPU decoding step: (W @ x.T).T over rows padded by `skinny_rows`,
    which streams the weight once, row-major; more rows than a decoding step has go to `F.linear`."""
    rows = x.numel() // x.shape[-1]
    padded = skinny_rows(rows)
    if rows > 64 or padded == 0:
        return F.linear(x, module.weight, module.bias)
    flat = x.reshape(rows, x.shape[-1])
    if padded != rows:
        flat = torch.cat([flat, flat.new_zeros(padded - rows, flat.shape[1])])
    out = torch.mm(module.weight, flat.t()).t()[:rows].contiguous()
    if module.bias is not None:
        out += module.bias
    return out.reshape(*x.shape[:-1], out.shape[-1])


def packable(module: torch.nn.Module) -> bool:
    """Whether `module` is a plain CPU `nn.Linear` that oneDNN can run packed under the bf16 autocast in force."""
    return (type(module) is torch.nn.Linear and module.weight.device.type == "cpu"
            and module.weight.dtype in (torch.float32, torch.bfloat16)
            and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
            and onednn_runs_bf16())


@functools.cache
def onednn_runs_bf16() -> bool:
    """Whether this torch build has oneDNN's packed linear ops and this CPU runs its bf16 kernels natively
    (AVX512-BF16 or AMX; on AVX2 alone torch's own `F.linear` path is left to decide)."""
    try:
        return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
                and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))
    except (AttributeError, RuntimeError):
        return False


class PackedLinears:
    """`member(x)` for groups of `nn.Linear`s (a group: one module, or siblings that read the same input) under CPU
    bf16 autocast: one oneDNN product over the group's weights stacked and reordered once into the kernel's layout.

    The group's first member computes every member's output and keeps the others' for their calls on the same
    input tensor; a member called on another input computes its own part alone. A weight changed in place (a
    switch of weights between tokens) or replaced is packed again: a pack remembers its weights' storages and
    version counters. Lives for one `decode` call (the packs hold a bf16 copy of the weights)."""

    def __init__(self):
        self.packs: dict[tuple, tuple] = {}  # group -> (stamp, packed weight, bias or None, output widths)
        self.waiting: dict[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}  # member -> (input, output)

    def __call__(self, group: tuple[torch.nn.Linear, ...], member: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        kept = self.waiting.pop(member, None)
        if kept is not None and kept[0] is x:
            return kept[1]
        if member is not group[0]:  # called out of the usual order: this member alone
            return self.product((member,), x)
        outputs = self.product(group, x).split(self.packs[group][3], dim=-1)
        for other, out in zip(group[1:], outputs[1:]):
            self.waiting[other] = (x, out)
        return outputs[0]

    def product(self, group: tuple[torch.nn.Linear, ...], x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> (..., sum of the group's out_features) in bf16."""
        stamp = [(p.data_ptr(), p._version) for m in group for p in (m.weight, m.bias) if p is not None]
        pack = self.packs.get(group)
        if pack is None or pack[0] != stamp:
            casts = [m.weight.detach().to(torch.bfloat16) for m in group]
            weight = casts[0] if len(casts) == 1 else torch.cat(casts)
            biases = [m.bias for m in group]
            bias = None
            if any(b is not None for b in biases):
                bias = torch.cat([(b.detach() if b is not None else m.weight.new_zeros(m.out_features))
                                  .to(torch.bfloat16) for m, b in zip(group, biases)])
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS)
            pack = self.packs[group] = (stamp, packed, bias, [m.out_features for m in group])
        return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), pack[1], pack[2], "none", [], "")


def packed_groups(model) -> list[tuple[torch.nn.Linear, ...]]:
    """The packable linears of `model` as groups: sibling projections of `FUSED_SIBLINGS` that are all packable
    and share their input width form one group, every other packable linear a group of its own."""
    grouped: set[torch.nn.Module] = set()
    groups = []
    for parent in model.modules():
        for names in FUSED_SIBLINGS:
            members = tuple(getattr(parent, name, None) for name in names)
            if all(m is not None and packable(m) for m in members) and len({m.in_features for m in members}) == 1:
                groups.append(members)
                grouped.update(members)
    groups += [(m,) for m in model.modules() if m not in grouped and packable(m)]
    return groups


@contextlib.contextmanager
def decoding_linears(model):
    """Every CPU `nn.Linear` of `model` computes through the decoding path its precision gains from inside the
    block: `PackedLinears` under CPU bf16 autocast, `skinny_linear` for float32 products (float32 weights, no
    lower-precision autocast); other linears (GPUs, fp16 autocast) are left alone."""
    paths = {}
    if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") != torch.float32:
        packed = PackedLinears()
        for group in packed_groups(model):
            for member in group:
                paths[member] = functools.partial(packed, group, member)
    else:
        paths = {m: functools.partial(skinny_linear, m) for m in model.modules() if isinstance(m, torch.nn.Linear)
                 and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32}
    with forwards_replaced(paths):
        yield
