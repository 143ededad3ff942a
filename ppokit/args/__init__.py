"""ppokit's arguments: PaddleNLP's schema as pydantic models, JSON/YAML + command-line loading, the
post-init rules and the batch arithmetic. Imports nothing heavy (no torch).

May import: pydantic and the algorithm table `ppokit.algorithms`; no other ppokit room, nothing heavy. The
verl/Hydra dialect sits above args (`ppokit.dialects.verl`); args reaches it by name through `dialect.py` alone.
"""

from .arguments import Arguments, DataArguments, ModelArguments, PpokitArguments, TrainingArguments
from .batch import BatchPlan, batch_plan
from .checks import check_lengths
from .cli import explain, parse_cli, resolved_config
from .errors import ConfigError
from .history import check_hub_datasets
from .loader import load_arguments, read_config_file
from .run_plan import LRSchedule, RunPlan, run_plan

__all__ = [
    "Arguments", "BatchPlan", "ConfigError", "DataArguments", "ModelArguments", "PpokitArguments",
    "TrainingArguments", "batch_plan", "check_hub_datasets", "check_lengths", "explain", "load_arguments", "parse_cli",
    "read_config_file", "resolved_config", "LRSchedule", "RunPlan", "run_plan",
]
