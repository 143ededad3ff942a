"""ppokit's import graph, lazy (function-level) imports included: no circles, no room importing one above it."""

from __future__ import annotations

import ast
from pathlib import Path

import ppokit

PACKAGE = Path(ppokit.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def resolve(name: str, known: set[str]) -> str | None:
    """The longest known module that `name` is or lives in (`ppokit.a.b.func` -> `ppokit.a.b`)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every ppokit module `name` imports anywhere in its file (top level, functions, TYPE_CHECKING aside)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            # `from a import b`: module a.b when b is a module, else a itself (resolve walks up)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            hit = resolve(target, known) if target.startswith("ppokit") else None
            if hit and hit != name:
                found.add(hit)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if colour.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(graph):
        if colour.get(node) is None:
            found = visit(node)
            if found:
                return found
    return None


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ppokit"


# Rooms from the bottom up; a room may import its own modules and rooms listed before it.
# algos and engine are libraries (torch / DeepSpeed only) every room above may call.
LAYERS = [
    "algorithms", "algos", "args", "dialects", "engine", "tasks", "data", "models", "rollout", "rewards", "tracking", "widgets", "training",
    "checkpoint", "export", "eval", "session", "launch", "bench",
]


def test_walker_sees_lazy_and_relative_imports():
    graph = import_graph()
    # Session imports training.build inside __init__: a function-level import the graph must contain.
    assert "ppokit.training.build" in graph["ppokit.session"]
    assert "ppokit.algos.masked" in graph["ppokit.algos.reduce"]  # `from .masked import ...`
    assert "ppokit.tasks" in graph["ppokit.rewards.functions"]  # `from ppokit import tasks` inside a function


def test_find_cycle_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_room_imports_a_room_above_it():
    upward = []
    for module, targets in import_graph().items():
        here = room(module)
        if here not in LAYERS:
            continue
        for target in targets:
            there = room(target)
            if there in LAYERS and LAYERS.index(there) > LAYERS.index(here):
                upward.append(f"{module} -> {target}")
    assert not upward, "rooms importing a room above them:\n" + "\n".join(sorted(upward))


def test_args_names_the_verl_dialect_in_its_one_seam_alone():
    """args sits below the dialects: only ppokit/args/dialect.py names one (loaded by name at call time)."""
    def names_a_dialect(path: Path) -> bool:  # an import of one, or a module name as a string (not prose)
        names: list[str] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names += [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.append(node.value)
        return any(n.startswith("ppokit.dialects") for n in names)

    assert sorted(p.name for p in (PACKAGE / "args").glob("*.py") if names_a_dialect(p)) == ["dialect.py"]
    import ppokit.dialects.verl as dialect
    from ppokit.args.dialect import verl

    assert verl() is dialect and callable(dialect.translate_verl) and callable(dialect.markdown_table)
