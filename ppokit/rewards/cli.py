"""`python reward_server.py [--task NAME | --function FILE.py:fn | --model PATH | --judge MODEL] [--host 127.0.0.1]
[--port 8731] [--token T] [--workers N] [--insecure]`: the reward server on uvicorn."""

from __future__ import annotations

import argparse
import inspect
import ipaddress
import json
import math
import os
import sys

from ppokit.errors import PpokitError
from ppokit.paths import check_paths
from ppokit.rewards.judge.options import add_judge_options, flag, judge_options
from ppokit.rewards.server import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_QUEUE,
    DEFAULT_REQUEST_TIMEOUT,
    create_app,
)

TOKEN_ENV = "PPOKIT_REWARD_TOKEN"
SPEC_ENV = "PPOKIT_REWARD_SERVER_SPEC"
MIN_TOKEN_CHARS = 16  # a guessable token on a reachable address is no protection  # hands the settings to worker processes when --workers > 1


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1; False for 0.0.0.0, :: and every other name or address."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, insecure: bool) -> None:
    """Refuse to listen beyond this machine without a token of at least MIN_TOKEN_CHARS characters, unless
    --insecure says so. Raises ValueError."""
    if is_loopback(host) or insecure:
        return
    if token and len(token) < MIN_TOKEN_CHARS:
        raise ValueError(
            f"refusing to listen on {host!r} with a {len(token)}-character token: off this machine a token must have "
            f"at least {MIN_TOKEN_CHARS} characters (e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))')")
    if token:
        return
    raise ValueError(
        f"refusing to listen on {host!r} without a token: anyone who can reach that address could score "
        f"(and load) your server. Set --token or {TOKEN_ENV}, or bind --host 127.0.0.1, or pass --insecure "
        "if the network is trusted"
    )


def _port(text: str) -> int:
    """A TCP port 0-65535 (0: any free one), else argparse's one-line error."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port: ports run from 0 to 65535 (default 8731)")
    return port


def _positive(text: str) -> float:
    """A finite number > 0 (inf and nan are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number greater than 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reward_server.py", description=(
        "ppokit reward server: PaddleNLP's protocol on POST /, OpenRLHF's on POST /get_reward, "
        "ppokit's on POST /v1/score. With no scorer it scores each item by its detected built-in task."))
    which = p.add_mutually_exclusive_group()
    which.add_argument("--task", help="score every item with this built-in task (knights_knaves, arithmetic, countdown)")
    which.add_argument("--function", metavar="FILE.py:fn", help="score with a reward function fn(prompts, responses, **fields)")
    which.add_argument("--model", metavar="PATH", help="score with a sequence-classification reward model")
    add_judge_options(p, which)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8731, help="TCP port, 0-65535 (default 8731)")
    p.add_argument("--token", default=os.environ.get(TOKEN_ENV) or None,
                   help=f"require 'Authorization: Bearer TOKEN' (default: ${TOKEN_ENV}; prefer the variable, "
                        "a command line is visible to other users)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (each loads the scorer)")
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback bind without a token")
    p.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH, help="most items per request")
    p.add_argument("--max-body-mb", type=_positive, default=DEFAULT_MAX_BODY_BYTES / 2**20, help="largest request body")
    p.add_argument("--request-timeout", type=_positive, default=DEFAULT_REQUEST_TIMEOUT, help="seconds per request")
    p.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                   help="requests that may wait for a scoring thread; beyond it (or with a stuck scorer) 503 at once")
    p.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (with --ssl-keyfile)")
    p.add_argument("--ssl-keyfile")
    p.add_argument("--log-level", default="info")
    return p


def check_judge_options(ns: argparse.Namespace, argv: list[str] | None) -> None:
    """--judge-* options act only with --judge: given without it, refused (they would be ignored). The options
    given are those that differ from their defaults when the defaults are taken away."""
    if ns.judge:
        return
    bare = build_parser()
    bare.set_defaults(**{k: None for k in vars(ns) if k.startswith("judge_")})
    given = [k for k, v in vars(bare.parse_args(argv)).items() if k.startswith("judge_") and v not in (None, False)]
    if given:
        options = ", ".join(flag(k) for k in given)
        verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
        raise ValueError(f"{options} {verb} only to an LLM judge, and no --judge MODEL is given: add --judge (a model "
                         f"folder, .gguf file, alias or endpoint URL), or drop {them}")


def server_paths(ns: argparse.Namespace) -> list:
    """The files the server reads (certificates, the function, model and judge template), as `PathUse`s: checked
    before anything loads or uvicorn starts."""
    from ppokit.paths import READ_ANY, READ_FILE, PathUse

    uses = [PathUse(f"--{name.replace('_', '-')}", value, READ_FILE)
            for name in ("ssl_certfile", "ssl_keyfile") if (value := getattr(ns, name, None))]
    if ns.function and ":" in ns.function:
        uses.append(PathUse("--function", ns.function.rpartition(":")[0], READ_FILE))
    for name in ("model", "judge"):
        value = getattr(ns, name, None)
        if value and not value.startswith(("http://", "https://")) and not _is_alias(value):
            from ppokit.models.loading import missing_model_message

            uses.append(PathUse(f"--{name}", value, READ_ANY, missing=missing_model_message(value)))
    template = ns.judge_template or ""
    if ns.judge and "\n" not in template and template.endswith((".j2", ".jinja", ".txt", ".md")):
        uses.append(PathUse("--judge-template", template, READ_FILE))
    return uses


def _is_alias(name: str) -> bool:
    from ppokit.models.loading import ALIASES

    return name.strip().lower() in ALIASES


def _spec(ns: argparse.Namespace) -> dict:
    return {"task": ns.task, "function": ns.function, "model": ns.model, "token": ns.token,
            "judge": ns.judge, "judge_options": judge_options(ns),
            "max_batch": ns.max_batch, "max_body_bytes": int(ns.max_body_mb * 2**20),
            "request_timeout": ns.request_timeout, "max_queue": ns.max_queue}


def app_from_spec(spec: dict):
    from ppokit.rewards.scorers import build_scorer

    scorer = build_scorer(task=spec.get("task"), function=spec.get("function"), model=spec.get("model"),
                          judge=spec.get("judge"), judge_options=spec.get("judge_options"))
    return create_app(scorer, token=spec.get("token"), max_batch=spec["max_batch"],
                      max_body_bytes=spec["max_body_bytes"], request_timeout=spec["request_timeout"],
                      max_queue=spec.get("max_queue", DEFAULT_MAX_QUEUE))


def app_from_env():
    """uvicorn factory for --workers > 1: the settings travel in an environment variable."""
    return app_from_spec(json.loads(os.environ[SPEC_ENV]))


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        check_judge_options(ns, argv)
        check_bind(ns.host, ns.token, ns.insecure)
        if ns.workers < 1:
            raise ValueError("--workers must be at least 1")
        spec = _spec(ns)
        check_paths(server_paths(ns))  # before loading: a missing certificate is a sentence, not uvicorn's traceback
        app = app_from_spec(spec)  # also checks the scorer loads before any worker starts
    except (ValueError, PpokitError) as exc:
        parser.error(str(exc))
    where = f"{'https' if ns.ssl_certfile else 'http'}://{ns.host}:{ns.port}"
    print(f"ppokit reward server on {where} (token {'required' if ns.token else 'not required'}); "
          f"train with use_rm_server: true, reward_server: \"{where}\"", file=sys.stderr)
    common = dict(host=ns.host, port=ns.port, log_level=ns.log_level,
                  ssl_certfile=ns.ssl_certfile, ssl_keyfile=ns.ssl_keyfile)
    if ns.workers == 1:
        uvicorn.run(app, **common)
    else:
        os.environ[SPEC_ENV] = json.dumps(spec)
        if "timeout_worker_healthcheck" in inspect.signature(uvicorn.run).parameters:
            common["timeout_worker_healthcheck"] = 60  # a worker loading a reward model starts slowly
        uvicorn.run("ppokit.rewards.cli:app_from_env", factory=True, workers=ns.workers, **common)
