"""verl's dialect: Hydra overrides and nested verl YAML onto ppokit's arguments through one key table, and a
PaddleNLP/ppokit argument file written back as a verl line.

* `hydra`: Hydra's override grammar, flattening and ``${...}`` interpolation.
* `table` (with `convert`, `rules`, `multi_turn`, `eras`): every verl key of every snapshotted release, what
  it sets in ppokit or why it has no effect or is refused.
* `overrides`: a launch line's tokens (or a nested YAML) translated through the table.
* `fit`: verl's launch plan (GPUs per node, nodes) fitted to this machine.
* `rewrite`: ``python -m ppokit.args translate FILE_OR_LINE --to verl|paddle``.
"""

from .overrides import (
           VerlTranslation,
           describe_verl_key,
           markdown_table,
           read_verl_yaml,
           split_argv,
           translate_verl,
)
from .rewrite import translate

__all__ = ["VerlTranslation", "describe_verl_key", "markdown_table", "read_verl_yaml", "split_argv", "translate",
           "translate_verl"]
