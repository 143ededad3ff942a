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


class StoppedAtOnce(KeyboardInterrupt):
    """A second SIGTERM stopped the run at once, wherever the main thread was (a reward function, a tool or judge
    call, the wait for the producer thread). A KeyboardInterrupt like Ctrl-C's, for the same reason: code that
    guards against a user's function failing (`except Exception`, a reward's `except KeyboardInterrupt: raise`)
    lets it through and never blames the function. The message is the sentence; exit status 143 (128 + SIGTERM).
    See `ppokit.checkpoint.signals`."""

    exit_code = 143


def exit_at_once(sentence: str, code: int):
    """Print `sentence` on stderr and end the process now with `code`, without waiting for threads still busy in
    user code (a reward function, a tool, a judge request, the producer thread): after a stop signal nothing they
    finish is used. For command lines only (a notebook's kernel must live on)."""
    import logging
    import os
    import sys

    print(sentence, file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
