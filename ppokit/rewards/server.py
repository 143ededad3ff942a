"""The reward server app (FastAPI). Three protocols over one scorer:

  POST /           PaddleNLP: {"src", "tgt", "response"} -> {"error_code": 0, "error_msg": "Success", "score"}
  POST /get_reward OpenRLHF:  {"query", "prompts"?, "labels"?} -> {"rewards", "scores", "extra_logs"}
  POST /v1/score   native:    {"items": [{"prompt", "response", "label", "task", "fields"}]} -> {"scores", "details"}
  GET  /health     {"status": "ok" | "saturated", "running", "waiting", ...} (no token needed; 503 when saturated)
  GET  /metrics    requests, items, errors, latency percentiles (ms)

Every failure is an HTTP error status with `{"error_code": <status>, "error_msg": <sentence>}` — never a
list of zeros: 401 wrong/missing token, 413 body or batch too large, 415 not JSON, 400 unparsable or too
deeply nested JSON, 422 invalid fields or an item naming what the scorer does not have (an unknown task), 500
the scorer raised (message names the item), 503 saturated,
504 scoring took too long.

Load: at most `max_concurrent` scoring threads run; up to `max_queue` requests wait for one. A thread whose
request timed out keeps its slot until the scorer returns (Python cannot stop it). The server is saturated
when the queue is full, or every slot is held and one of them has run past the request timeout; then
/health says so (503) and new requests get 503 at once (the client retries later) instead of waiting
out their timeout behind a stuck scorer.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import math
import os
import time
from collections import Counter, deque
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from ppokit.rewards.errors import RewardError, UnscorableRequest
from ppokit.rewards.scorers import Scorer

DEFAULT_MAX_BATCH = 8192
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT = 300.0
DEFAULT_MAX_QUEUE = 64
DEFAULT_MAX_CONCURRENT = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default thread pool size


# ---------------------------------------------------------------- request models


class PaddleRequest(BaseModel):
    src: list[str]
    tgt: list[str | None]
    response: list[str]

    @model_validator(mode="after")
    def _same_length(self):
        if not len(self.src) == len(self.tgt) == len(self.response):
            raise ValueError(f"src, tgt and response must have equal lengths, got "
                             f"{len(self.src)}, {len(self.tgt)} and {len(self.response)}")
        return self


class OpenRLHFRequest(BaseModel):
    query: list[str]
    prompts: list[str] | None = None
    labels: list[str | None] | None = None

    @model_validator(mode="after")
    def _same_length(self):
        for name in ("prompts", "labels"):
            other = getattr(self, name)
            if other is not None and len(other) != len(self.query):
                raise ValueError(f"{name} has {len(other)} entries but query has {len(self.query)}")
        return self


class NativeItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str
    response: str
    label: str | None = None
    task: str | None = None
    fields: dict[str, Any] = Field(default_factory=dict)


class NativeRequest(BaseModel):
    items: list[NativeItem]


def paddle_items(req: PaddleRequest) -> list[dict]:
    return [{"prompt": s, "label": t, "response": r, "task": None, "fields": {}}
            for s, t, r in zip(req.src, req.tgt, req.response)]


def openrlhf_items(req: OpenRLHFRequest) -> list[dict]:
    """response = query[len(prompt):] when the query starts with its prompt, else the whole query."""
    items = []
    for i, query in enumerate(req.query):
        prompt = req.prompts[i] if req.prompts else ""
        response = query[len(prompt):] if prompt and query.startswith(prompt) else query
        label = req.labels[i] if req.labels else None
        items.append({"prompt": prompt, "label": label, "response": response, "task": None, "fields": {}})
    return items


def native_items(req: NativeRequest) -> list[dict]:
    return [item.model_dump() for item in req.items]


# ---------------------------------------------------------------- metrics


class Metrics:
    """Counters and the latencies of the last 4096 requests (single event-loop thread: no lock)."""

    def __init__(self) -> None:
        self.requests = 0
        self.items = 0
        self.errors = 0
        self.status: Counter[int] = Counter()
        self.latencies: deque[float] = deque(maxlen=4096)

    def record(self, items: int, seconds: float, status: int) -> None:
        self.requests += 1
        self.items += items if status == 200 else 0
        self.errors += status != 200
        self.status[status] += 1
        self.latencies.append(seconds)

    def snapshot(self) -> dict:
        ordered = sorted(self.latencies)

        def pct(p: float) -> float | None:
            if not ordered:
                return None
            return round(1000 * ordered[min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1)], 3)

        return {
            "requests": self.requests,
            "items": self.items,
            "errors": self.errors,
            "status": {str(k): v for k, v in sorted(self.status.items())},
            "latency_ms": {"p50": pct(50), "p90": pct(90), "p99": pct(99)},
        }


# ---------------------------------------------------------------- request guards


def check_token(request: Request, token: str | None) -> None:
    if token is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPException(
            401,
            "missing or wrong bearer token; send 'Authorization: Bearer <token>' with the server's --token "
            "(ppokit reads it from reward_server_token or PPOKIT_REWARD_TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )


async def read_json(request: Request, max_body_bytes: int) -> Any:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise HTTPException(415, f"the body must be JSON sent with 'Content-Type: application/json', "
                                 f"not {ctype or 'no content type'!r}")
    too_big = (f"the request body is larger than the server's limit of {max_body_bytes} bytes; "
               "send smaller batches or start the server with a larger --max-body-mb")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body_bytes:
        raise HTTPException(413, too_big)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body_bytes:
            raise HTTPException(413, too_big)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise HTTPException(400, f"the body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise HTTPException(400, TOO_DEEP) from None


TOO_DEEP = "the JSON body is nested too deeply to parse; send flat lists of strings as the protocol describes"


def parse(model: type[BaseModel], data: Any) -> BaseModel:
    try:
        return model.model_validate(data)
    except RecursionError:
        raise HTTPException(400, TOO_DEEP) from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg'].removeprefix('Value error, ')}"
                             for e in exc.errors())
        raise HTTPException(422, f"invalid {model.__name__}: {problems}") from exc


def _plain(value: Any) -> Any:
    """JSON-safe copy of a details value (non-finite floats become None, unknown objects strings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _extra_logs(details: list[dict]) -> dict[str, list[float]]:
    """Numeric detail keys every item has, as per-item lists (OpenRLHF's extra_logs)."""
    if not details:
        return {}
    keys = [k for k, v in details[0].items() if isinstance(v, (int, float))]
    return {k: [float(d[k]) for d in details] for k in keys
            if all(isinstance(d.get(k), (int, float)) for d in details)}


# ---------------------------------------------------------------- load


class Load:
    """Scoring threads running (with their start times) and requests waiting for one (event-loop thread only)."""

    def __init__(self, max_concurrent: int, max_queue: int, request_timeout: float) -> None:
        self.max_concurrent, self.max_queue, self.request_timeout = max_concurrent, max_queue, request_timeout
        self.running: dict[int, float] = {}
        self.waiting = 0
        self.next_id = 0
        self.free = asyncio.Event()
        self.free.set()

    def saturated(self) -> bool:
        now = time.monotonic()
        stuck = any(now - t > self.request_timeout for t in self.running.values())
        full = len(self.running) >= self.max_concurrent
        return self.waiting >= self.max_queue or (full and stuck)

    def health(self) -> dict:
        now = time.monotonic()
        longest = max((now - t for t in self.running.values()), default=0.0)
        return {"status": "saturated" if self.saturated() else "ok", "running": len(self.running),
                "waiting": self.waiting, "max_concurrent": self.max_concurrent, "max_queue": self.max_queue,
                "longest_running_s": round(longest, 3)}

    def finished(self, job: int) -> None:
        self.running.pop(job, None)
        self.free.set()

    async def run(self, fn, *args):
        """fn(*args) in a thread once a slot is free; the slot is held until the thread returns."""
        loop = asyncio.get_running_loop()
        self.waiting += 1
        try:
            while len(self.running) >= self.max_concurrent:
                self.free.clear()
                await self.free.wait()
        finally:
            self.waiting -= 1
        job, self.next_id = self.next_id, self.next_id + 1
        self.running[job] = time.monotonic()

        def call():
            try:
                return fn(*args)
            finally:
                loop.call_soon_threadsafe(self.finished, job)

        return await asyncio.shield(loop.run_in_executor(None, call))


# ---------------------------------------------------------------- the app


def _answer_errors_as_json(app: FastAPI) -> None:
    """Every error, expected or not, answers with PaddleNLP's body (its client reads error_code/error_msg)."""

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return JSONResponse({"error_code": exc.status_code, "error_msg": str(exc.detail)},
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        return JSONResponse({"error_code": 500, "error_msg": f"the server failed: {type(exc).__name__}: {exc}"},
                            status_code=500)


async def score_with(load: Load, scorer: Scorer, items: list[dict], request_timeout: float) -> list[tuple[float, dict]]:
    """`scorer` on `items` through the server's load limits; each way it can fail is the HTTP status it means."""
    if load.saturated():
        state = load.health()
        raise HTTPException(503, f"the server is saturated ({state['running']} scoring jobs running, the longest "
                                 f"for {state['longest_running_s']:g}s; {state['waiting']} waiting); retry later, "
                                 "or start it with more --workers or a larger --max-queue")
    try:
        return await asyncio.wait_for(load.run(scorer, items), request_timeout)
    except asyncio.TimeoutError as exc:
        raise HTTPException(504, f"scoring {len(items)} items took longer than the server's "
                                 f"request timeout of {request_timeout:g}s; send smaller batches or "
                                 "start the server with a larger --request-timeout") from exc
    except UnscorableRequest as exc:
        raise HTTPException(422, f"the request cannot be scored: {exc}") from exc
    except RewardError as exc:
        raise HTTPException(500, f"scoring failed: {exc}") from exc
    except Exception as exc:
        raise HTTPException(500, f"scoring failed: the scorer raised {type(exc).__name__}: {exc}") from exc


def create_app(scorer: Scorer, token: str | None = None, max_batch: int = DEFAULT_MAX_BATCH,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
               max_queue: int = DEFAULT_MAX_QUEUE, max_concurrent: int = DEFAULT_MAX_CONCURRENT) -> FastAPI:
    """A FastAPI app serving `scorer` on the three protocols (see the module docstring).

    token: when set, every route but /health needs 'Authorization: Bearer <token>'.
    max_batch: most items per request (413 beyond). max_body_bytes: largest body (413 beyond).
    request_timeout: seconds a request may spend waiting and scoring (504 beyond; the thread finishes on its own).
    max_queue, max_concurrent: see "Load" in the module docstring.
    """
    app = FastAPI(title="ppokit reward server", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = Metrics()
    app.state.metrics = metrics
    load = Load(max_concurrent, max_queue, request_timeout)
    _answer_errors_as_json(app)

    async def score(items: list[dict]) -> list[tuple[float, dict]]:
        return await score_with(load, scorer, items, request_timeout)

    async def handle(request: Request, model: type[BaseModel], to_items) -> tuple[list[float], list[dict]]:
        start, n = time.perf_counter(), 0
        try:
            check_token(request, token)
            items = to_items(parse(model, await read_json(request, max_body_bytes)))
            n = len(items)
            if n > max_batch:
                raise HTTPException(413, f"the request has {n} items but the server takes at most "
                                         f"{max_batch}; send smaller batches or raise --max-batch")
            results = await score(items) if items else []
            if len(results) != n:
                raise HTTPException(500, f"the scorer returned {len(results)} results for {n} items")
        except HTTPException as exc:
            metrics.record(n, time.perf_counter() - start, exc.status_code)
            raise
        except Exception as exc:  # a bug, not the user's request: still a JSON answer, still counted
            metrics.record(n, time.perf_counter() - start, 500)
            raise HTTPException(500, f"the server failed on this request: {type(exc).__name__}: {exc}") from exc
        metrics.record(n, time.perf_counter() - start, 200)
        return [s for s, _ in results], [_plain(d) for _, d in results]

    @app.post("/")
    async def paddle(request: Request):
        scores, _ = await handle(request, PaddleRequest, paddle_items)
        return {"error_code": 0, "error_msg": "Success", "score": scores}

    @app.post("/get_reward")
    async def openrlhf(request: Request):
        scores, details = await handle(request, OpenRLHFRequest, openrlhf_items)
        return {"rewards": scores, "scores": scores, "extra_logs": _extra_logs(details)}

    @app.post("/v1/score")
    async def native(request: Request):
        scores, details = await handle(request, NativeRequest, native_items)
        return {"scores": scores, "details": details}

    @app.get("/health")
    async def health():
        state = load.health()
        return JSONResponse(state, status_code=503 if state["status"] == "saturated" else 200)

    @app.get("/metrics")
    async def get_metrics(request: Request):
        check_token(request, token)
        return metrics.snapshot()

    return app
