"""Train with a PaddleNLP-style argument file: ``python run_ppo.py CONFIG.{json,yaml} [--key value ...]``."""

import sys

from ppokit.args import parse_cli
from ppokit.errors import PpokitError, exit_at_once, exit_with_sentence


def main() -> None:
    """Parse the arguments (exits on --print_config or a config mistake), then train."""
    args = parse_cli(sys.argv[1:])
    from ppokit.checkpoint.claim import refuse_before_loading
    from ppokit.checkpoint.signals import stop_sentence
    from ppokit.session import Session

    try:
        refuse_before_loading(args)  # an earlier run's folder is refused before minutes of model loading
        Session(args).train()
    except PpokitError as exc:  # a user's mistake, a failed reward source, SIGTERM (143): a sentence, no traceback
        exit_with_sentence(exc, getattr(exc, "exit_code", 2))
    except KeyboardInterrupt as exc:  # Ctrl-C (130) or a second SIGTERM (143): one sentence, out at once
        exit_at_once(*stop_sentence(exc, args.output_dir))


def exit_launched_process() -> None:
    """Leave the process group and exit (imported here: --print_config must not import torch)."""
    from ppokit.engine import exit_launched_process as leave

    leave(0)


if __name__ == "__main__":
    main()
    exit_launched_process()
