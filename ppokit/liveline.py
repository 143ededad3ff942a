"""The one terminal line a running stage shows ("ppokit: reading the prompts…"), and how other output goes beside it.

Every room that prints while a stage may be running (the console's `say`, the log handler run_ppo.py installs)
wraps its output in `beside_live_line`. Imports nothing from ppokit, so the lowest room may use it.
"""

from __future__ import annotations

import contextlib

LIVE: list = []  # the terminal line a running stage shows ("ppokit: reading the prompts…"), as (out, text)


@contextlib.contextmanager
def beside_live_line():
    """Other output while a stage's line shows in a terminal: the line is wiped, the output printed on a line of
    its own, the stage's line shown again below it (so a note never lands glued to "reading the prompts…")."""
    if not LIVE:
        yield
        return
    out, text = LIVE[-1]
    out.write("\r\033[K")
    out.flush()
    try:
        yield
    finally:
        out.write(text)
        out.flush()
