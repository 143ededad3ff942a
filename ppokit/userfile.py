"""Importing a user's Python file (`reward_functions: "my.py:fn"`, `tools: "my_tools.py:multiply"`): once per file,
cached in `sys.modules` under a name made from its resolved path, so two files with one stem never collide."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_user_file(path: Path, prefix: str) -> ModuleType:
    """The module of the .py file at `path` (imported on first use). An exception from the file's own code is
    raised as it is (the caller words it), and the half-imported module is forgotten."""
    found = path.resolve()
    name = f"{prefix}_{found.stem}_{hashlib.sha1(str(found).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, found)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
