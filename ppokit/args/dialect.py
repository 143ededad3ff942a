"""Where args' own front doors meet the verl dialect: run_ppo.py's ``key=value`` tokens (`parse_cli`), a dotted
key in `explain`, and ``python -m ppokit.args translate | verl-table``.

The dialect (`ppokit.dialects.verl`) builds `Arguments`, so it sits above args; args imports it by name at call
time, here alone, so the import graph keeps one direction (args -> dialects never appears as an import).
"""

from __future__ import annotations

import importlib
from types import ModuleType

VERL_DIALECT = "ppokit.dialects.verl"


def verl() -> ModuleType:
    """``ppokit.dialects.verl``: split_argv, translate_verl, describe_verl_key, translate, markdown_table."""
    return importlib.import_module(VERL_DIALECT)
