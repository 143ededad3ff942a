"""The errors the reward room raises, each with a sentence a user can act on, and the advice rule of its endpoints."""

from __future__ import annotations

from ppokit.errors import PpokitError


class RewardError(PpokitError):
    """A reward could not be computed: a function raised, returned NaN/None/a non-number or the wrong
    number of values, or was misconfigured. `index` and `source` name the offending record when known."""

    def __init__(self, message: str, index: int | None = None, source: str | None = None):
        super().__init__(message)
        self.index = index
        self.source = source


class UnscorableRequest(RewardError):
    """A request names something the scorer does not have (an unknown task): no retry can answer it, so the
    reward server answers 422 (a client error, which clients do not retry) instead of 500."""


class RewardServerError(PpokitError):
    """The reward server could not score a batch: it was unreachable or failing after every retry,
    answered 4xx (a bad request, not retried), or sent a malformed answer."""

    def __init__(self, message: str, url: str = "", attempts: int = 0, status: int | None = None):
        super().__init__(message)
        self.url = url
        self.attempts = attempts
        self.status = status


def endpoint_advice(url: str, *, status: int | None = None, error: BaseException | None = None,
                    server: str = "the server", url_key: str = "the URL", token_key: str = "the token") -> str:
    """What to check after an HTTP endpoint (the reward server, a judge endpoint) failed, chosen by how it failed —
    the one rule every endpoint error follows: the advice names only what can cause that failure. `error`: the
    transport exception (no answer came); else `status`: the HTTP status it answered."""
    import httpx

    if isinstance(error, httpx.TimeoutException):
        return f"{url} did not answer in time: raise reward_timeout, or check {server}'s load"
    if isinstance(error, httpx.ConnectError):
        return f"nothing answers at {url}: start {server} there, or correct {url_key}"
    if error is not None:
        return f"the connection to {url} failed: check that {server} runs there and is reachable ({url_key})"
    if status in (401, 403):
        return f"{url} refused the credentials: set {token_key} to the token {server} expects"
    if status == 404:
        return f"{url} has no such route or model: check {url_key}"
    if status in (408, 429):
        return f"{server} was too busy: retry later, or raise reward_max_retries"
    if status is not None and status >= 500:
        return f"{server} failed on the request: its message above, and its log, say why"
    return f"{server} rejected the request itself: its message above says why"
