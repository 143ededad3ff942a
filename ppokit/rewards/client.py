"""The reward server client: a RewardFn that scores over HTTP, and never turns a failure into zeros.

It speaks PaddleNLP's protocol by default (`POST url` with `{"src", "tgt", "response"}` lists, answer
`{"error_code": 0, "error_msg": "Success", "score": [...]}`), so it works against PaddleNLP's own sample
server as well as ppokit's `reward_server.py`; `protocol="native"` posts ppokit's `/v1/score` items
instead (which carry each record's `task` and `fields`).

Batches of `batch_size` items go out on up to `concurrency` threads. A connection error, a timeout, an
HTTP 5xx, 408 or 429 is retried `max_retries` times with exponential backoff and jitter; then
`RewardServerError` (url, attempts, last error). Any other 4xx, an answer with a non-zero `error_code`,
or a malformed answer is raised at once: retrying a wrong request would not help.

Two ways to call it:
  `client(prompts, responses, label=[...]) -> list[float]` raises RewardServerError on any failure.
  `client.score_or_none(...) -> list[float | None]` returns None for every item of a batch that was
  still failing after the last retry (server unreachable, 5xx, timeouts) and raises for everything
  else. This backs `reward_on_error: skip_group`: the caller drops each group holding a None.
Results depend only on the inputs and the server's answers, never on timing or thread order.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ppokit.rewards.errors import RewardServerError, endpoint_advice

TOKEN_ENV = "PPOKIT_REWARD_TOKEN"
RETRY_STATUS = {408, 429}
MAX_DELAY_S = 30.0
log = logging.getLogger("ppokit.rewards")


def _message(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:300] or resp.reason_phrase
    if isinstance(data, dict):
        msg = data.get("error_msg") or data.get("detail") or data.get("error") or data
        return str(msg)[:500]
    return str(data)[:300]


class RewardServerClient:
    """Score responses on a reward server. See the module docstring for the retry and error rules."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        batch_size: int = 64,
        concurrency: int = 4,
        backoff: float = 0.5,
        protocol: str = "paddle",
        transport: httpx.BaseTransport | None = None,
    ):
        if not url or not url.startswith(("http://", "https://")):
            raise RewardServerError(f"reward_server {url!r} is not an http(s) URL; e.g. http://127.0.0.1:8731")
        if protocol not in ("paddle", "native"):
            raise RewardServerError(f"reward server protocol {protocol!r} is unknown; use 'paddle' or 'native'")
        if batch_size < 1 or concurrency < 1 or max_retries < 0:
            raise RewardServerError("batch_size and concurrency must be >= 1 and max_retries >= 0")
        self.url = url
        self.protocol = protocol
        self.endpoint = url if protocol == "paddle" or url.rstrip("/").endswith("/v1/score") else url.rstrip("/") + "/v1/score"
        self.max_retries = max_retries
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.backoff = backoff
        token = token or os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)
        self._rng = random.Random()  # jitter only; never affects results

    # ------------------------------------------------------------ public

    def __call__(self, prompts: Sequence[str], responses: Sequence[str], **fields: Any) -> list[float]:
        """One float per response; RewardServerError on any failure."""
        return self._score(prompts, responses, fields, skip=False)

    def score_or_none(self, prompts: Sequence[str], responses: Sequence[str], **fields: Any) -> list[float | None]:
        """Like calling the client, but items of batches still unavailable after the retries are None."""
        return self._score(prompts, responses, fields, skip=True)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RewardServerClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------ batching

    def _score(self, prompts, responses, fields, skip: bool) -> list:
        n = len(responses)
        if len(prompts) != n:
            raise RewardServerError(f"got {len(prompts)} prompts for {n} responses; they must pair up")
        starts = list(range(0, n, self.batch_size))

        def run(start: int) -> list:
            stop = min(start + self.batch_size, n)
            payload = self._payload(prompts, responses, fields, start, stop)
            try:
                return self._post(payload, stop - start)
            except RewardServerError as exc:
                if skip and self._exhausted(exc):
                    log.warning("reward server: items %d..%d skipped: %s", start, stop - 1, exc)
                    return [None] * (stop - start)
                raise

        if len(starts) <= 1 or self.concurrency == 1:
            parts = [run(s) for s in starts]
        else:
            pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(starts)))
            try:
                parts = list(pool.map(run, starts))
            finally:  # a stop signal (Ctrl-C, a second SIGTERM) does not wait for the requests in flight
                pool.shutdown(wait=False, cancel_futures=True)
        return [x for part in parts for x in part]

    def _exhausted(self, exc: RewardServerError) -> bool:
        """True for a batch still unavailable after every retry (not for a rejected or malformed one)."""
        retryable = exc.status is None or exc.status >= 500 or exc.status in RETRY_STATUS
        return retryable and exc.attempts == self.max_retries + 1

    def _payload(self, prompts, responses, fields, start: int, stop: int) -> dict:
        labels = fields.get("label") or [None] * len(responses)
        if self.protocol == "paddle":
            return {
                "src": [str(p) for p in prompts[start:stop]],
                "tgt": ["" if x is None else str(x) for x in labels[start:stop]],
                "response": [str(r) for r in responses[start:stop]],
            }
        tasks = fields.get("task") or [None] * len(responses)
        records = fields.get("records") or [{} for _ in responses]
        items = []
        for i in range(start, stop):
            items.append({
                "prompt": str(prompts[i]),
                "response": str(responses[i]),
                "label": None if labels[i] is None else str(labels[i]),
                "task": tasks[i],
                "fields": dict(records[i].get("fields") or {}),
            })
        return {"items": items}

    # ------------------------------------------------------------ one request with retries

    def _delay(self, attempt: int) -> float:
        delay = min(self.backoff * (2 ** (attempt - 1)), MAX_DELAY_S)
        return delay * (0.5 + 0.5 * self._rng.random())

    def _post(self, payload: dict, n: int) -> list[float]:
        attempts = self.max_retries + 1
        last, status, error = "", None, None
        for attempt in range(attempts):
            if attempt:
                time.sleep(self._delay(attempt))
            try:
                resp = self._http.post(self.endpoint, json=payload)
            except httpx.TransportError as exc:
                last, status, error = f"{type(exc).__name__}: {exc}", None, exc
                log.warning("reward server %s: attempt %d/%d failed: %s", self.url, attempt + 1, attempts, last)
                continue
            except TypeError as exc:
                raise RewardServerError(f"the request to {self.url} could not be encoded as JSON: {exc}",
                                        url=self.url) from exc
            status, error = resp.status_code, None
            if status >= 500 or status in RETRY_STATUS:
                last = f"HTTP {status}: {_message(resp)}"
                log.warning("reward server %s: attempt %d/%d failed: %s", self.url, attempt + 1, attempts, last)
                continue
            if status != 200:
                raise RewardServerError(
                    f"reward server {self.endpoint} rejected the request with HTTP {status}: {_message(resp)} "
                    f"(not retried: a request it cannot answer); {self._advice(status=status)}",
                    url=self.url, attempts=attempt + 1, status=status,
                )
            return self._parse(resp, n)
        raise RewardServerError(
            f"reward server {self.endpoint} failed after {attempts} attempts; last error: {last}; "
            f"{self._advice(status=status, error=error)}",
            url=self.url, attempts=attempts, status=status,
        )

    def _advice(self, status: int | None = None, error: BaseException | None = None) -> str:
        return endpoint_advice(self.endpoint, status=status, error=error, server="the reward server "
                               "(python reward_server.py)", url_key="reward_server",
                               token_key="reward_server_token (or PPOKIT_REWARD_TOKEN)")

    def _parse(self, resp: httpx.Response, n: int) -> list[float]:
        try:
            data = resp.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise RewardServerError(f"reward server {self.endpoint} answered HTTP 200 with something that is "
                                    f"not a JSON object: {resp.text[:200]!r}", url=self.url, status=200)
        code = data.get("error_code", 0)
        if code not in (0, None):
            raise RewardServerError(f"reward server {self.endpoint} reported error_code {code}: "
                                    f"{data.get('error_msg')}", url=self.url, status=200)
        key = "score" if self.protocol == "paddle" else "scores"
        scores = data.get(key)
        if not isinstance(scores, list) or len(scores) != n:
            got = f"{len(scores)} scores" if isinstance(scores, list) else f"no {key!r} list"
            raise RewardServerError(f"reward server {self.endpoint} sent {got} for {n} responses",
                                    url=self.url, status=200)
        for i, s in enumerate(scores):
            if not isinstance(s, (int, float)) or not math.isfinite(s):
                raise RewardServerError(f"reward server {self.endpoint} sent score {s!r} for item {i}; "
                                        "every score must be a finite number", url=self.url, status=200)
        return [float(s) for s in scores]
