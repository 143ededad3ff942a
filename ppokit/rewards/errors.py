"""The two errors the reward room raises. Both carry a sentence a user can act on."""

from __future__ import annotations

from ppokit.errors import PpokitError


class RewardError(PpokitError):
    """A reward could not be computed: a function raised, returned NaN/None/a non-number or the wrong
    number of values, or was misconfigured. `index` and `source` name the offending record when known."""

    def __init__(self, message: str, index: int | None = None, source: str | None = None):
        super().__init__(message)
        self.index = index
        self.source = source


class RewardServerError(PpokitError):
    """The reward server could not score a batch: it was unreachable or failing after every retry,
    answered 4xx (a bad request, not retried), or sent a malformed answer."""

    def __init__(self, message: str, url: str = "", attempts: int = 0, status: int | None = None):
        super().__init__(message)
        self.url = url
        self.attempts = attempts
        self.status = status
