"""Train with a PaddleNLP-style argument file: ``python run_ppo.py CONFIG.{json,yaml} [--key value ...]``."""

import sys

from ppokit.args import parse_cli


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that report a user's mistake or a failed reward source: shown as a sentence, no traceback."""
    from ppokit.args import ConfigError
    from ppokit.checkpoint import CheckpointError
    from ppokit.data import DataError
    from ppokit.models import ModelNotFoundError
    from ppokit.rewards import RewardError, RewardServerError
    from ppokit.tasks import TaskError

    return (ConfigError, CheckpointError, DataError, ModelNotFoundError, RewardError, RewardServerError, TaskError)


def main() -> None:
    """Parse the arguments (exits on --print_config or a config mistake), then train."""
    args = parse_cli(sys.argv[1:])
    from ppokit.session import Session

    try:
        Session(args).train()
    except user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
