"""Keep what C code and compiler probes write to the terminal out of a person's way (logged at DEBUG instead)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile

logger = logging.getLogger("ppokit")


@contextlib.contextmanager
def captured_native_output(what: str):
    """Capture what is written to file descriptors 1 and 2 (C code, compiler probes) and log it at DEBUG.

    DeepSpeed probes its ops by compiling test programs, which print e.g. `/usr/bin/ld: cannot find
    -laio` straight to the terminal; none of it is the user's business unless they debug DeepSpeed
    (`--log_level debug` / `logging.getLogger("ppokit").setLevel("DEBUG")` shows it).
    """
    fds = {1, 2}  # what a compiler subprocess inherits, plus where Python's streams write if elsewhere
    for s in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):  # streams without a descriptor
            fds.add(s.fileno())
    for s in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            s.flush()
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = [os.dup(fd) for fd in fds]
        try:
            for fd in fds:
                os.dup2(sink.fileno(), fd)
            with contextlib.redirect_stdout(_Sink()), contextlib.redirect_stderr(_Sink()) as _:
                yield
        finally:
            for s in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    s.flush()
            for fd, copy in zip(fds, saved):
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace").strip()
            if text:
                logger.debug("%s wrote:\n%s", what, text)


class _Sink:
    """A text stream that drops what Python code prints while native output is captured."""

    def write(self, text: str) -> int:
        if text.strip():
            logger.debug("%s", text.rstrip())
        return len(text)

    def flush(self) -> None:
        pass
