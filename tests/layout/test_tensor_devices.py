"""Tensor constructors in ppokit/training, ppokit/rollout and ppokit/algos take their device from an input.

`torch.zeros(n)` makes a CPU tensor; next to a model on a GPU it fails ("Expected all tensors to be on the same
device"), and no CPU test sees it. So every `torch.<constructor>(...)` there names `device=` (taken from an input,
not a string), or sits in a function below whose tensors are host-side on purpose, with the reason.
`*_like` and `Tensor.new_*` follow their input already and are not constructors here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("ppokit/training", "ppokit/rollout", "ppokit/algos")
CONSTRUCTORS = frozenset({"zeros", "ones", "full", "empty", "arange", "range", "linspace", "logspace", "eye",
                          "tensor", "as_tensor", "rand", "randn", "randint", "randperm", "tril_indices",
                          "triu_indices", "LongTensor", "FloatTensor", "BoolTensor", "Tensor"})
# (file, function): why its tensors are built on the host
HOST_SIDE = {
    ("ppokit/training/batch.py", "build_batch"):
        "the rollout batch is assembled on the host from the engine's token lists; rewards, advantages and metrics "
        "are computed there, and each micro-batch is moved by to_model_device before a forward",
    ("ppokit/training/packing.py", "pack_by_prompt"):
        "packing loops over Python ints on host copies of the rows; the packed rows are moved to the input's device "
        "at the end (one transfer, not one per column)",
    ("ppokit/rollout/vllm_engine.py", "_call_seed"):
        "a draw from the trainer's CPU random stream (the one a checkpoint restores) seeds a vLLM call; it is a "
        "number, never a tensor the model sees",
    ("ppokit/training/waiting.py", "_hold"):
        "one parallel region on the host's OpenMP threads (how they wait is the point); never seen by a model",
    ("ppokit/training/ptx.py", "ptx_tensors"):
        "built from token lists on the host; ptx_nll moves them with to_model_device",
}


def offenders() -> list[str]:
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(), filename=rel)
            for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]:
                owner = getattr(func, "name", "<module>")
                for call in calls_in(func):
                    if (rel, owner) not in HOST_SIDE and not takes_device(call):
                        found.append(f"{rel}:{call.lineno} ({owner}): {ast.unparse(call)[:100]}")
    return sorted(set(found))


def calls_in(scope) -> list[ast.Call]:
    """torch.<constructor>(...) calls directly in `scope` (not in functions nested in it, which are scanned alone)."""
    out, todo = [], list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CONSTRUCTORS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def takes_device(call: ast.Call) -> bool:
    device = next((k.value for k in call.keywords if k.arg == "device"), None)
    return device is not None and not isinstance(device, ast.Constant)


def test_tensor_constructors_take_their_device_from_an_input():
    bad = offenders()
    assert not bad, ("tensor constructors without a device from an input (they make CPU tensors; pass "
                     "device=<an input>.device, or add the function to HOST_SIDE with the reason):\n" + "\n".join(bad))


def test_the_scan_finds_a_constructor_without_a_device(tmp_path):
    tree = ast.parse("def f(x):\n    a = torch.zeros(3)\n    b = torch.arange(4, device=x.device)\n"
                     "    c = torch.ones(2, device='cpu')\n    return torch.zeros_like(x)\n")
    calls = calls_in(tree.body[0])
    assert sorted((c.func.attr, takes_device(c)) for c in calls) == [("arange", True), ("ones", False),
                                                                      ("zeros", False)]


def test_every_host_side_exception_still_exists():
    for rel, owner in HOST_SIDE:
        tree = ast.parse((ROOT / rel).read_text())
        funcs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert owner in funcs, f"{rel} has no function {owner}: remove it from HOST_SIDE"
        assert calls_in(funcs[owner]), f"{rel}:{owner} builds no tensor any more: remove it from HOST_SIDE"
