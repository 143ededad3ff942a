"""Train with a PaddleNLP-style argument file: ``python run_ppo.py CONFIG.{json,yaml} [--key value ...]``."""

import sys

from ppokit.args import parse_cli


def main() -> None:
    """Parse the arguments (exits on --print_config or a config mistake), then train."""
    args = parse_cli(sys.argv[1:])
    from ppokit.session import Session

    Session(args).train()


if __name__ == "__main__":
    main()
