"""The one base class of every error that reports a user's mistake or a failed reward source.

run_ppo.py, the command-line tools and notebooks catch `PpokitError` alone and show its message as a
sentence (exit status 2 on the command line); anything else is a bug and keeps its traceback.
This module imports nothing from ppokit, so every room can derive its errors from it.
"""


class PpokitError(Exception):
    """A mistake the user can act on (config, data, checkpoint, model, reward, task, export ...).

    The message is a sentence naming the file, line, key or record and what was expected."""


def exit_with_sentence(exc: PpokitError, code: int = 2):
    """Print `error: <sentence>` on stderr and exit with `code`: what every ppokit command does with a PpokitError."""
    import sys

    print(f"error: {exc}", file=sys.stderr)
    raise SystemExit(code)
