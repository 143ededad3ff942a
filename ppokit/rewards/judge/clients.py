"""Where the judge's verdicts come from: a model in this process (HF folder, .gguf or alias), a vLLM engine, or an
OpenAI-compatible `/v1/chat/completions` endpoint.

Every client answers `complete(conversations) -> list[JudgeReply]`, one reply per conversation, in order. A client
never raises for one failed conversation: the reply carries `error` (a sentence) and the judge counts it.

An in-process judge loads its own copy of the weights (never the trained model's tensors), in eval mode, with
gradients off, and generates in batches of `batch_size` conversations per generate call. Greedy (temperature 0) is
deterministic; sampling draws from its own seeded generator stream inside `torch.random.fork_rng`, so the judge
never moves the trainer's random state.
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

TOKEN_ENV = "PPOKIT_JUDGE_TOKEN"


@dataclass(frozen=True)
class JudgeReply:
    text: str = ""
    tokens: int = 0  # prompt + completion tokens this conversation cost
    error: str | None = None  # why there is no verdict (timeout, endpoint error), a sentence
    first_token_probs: dict[str, float] | None = None  # the likeliest first verdict tokens (judge_parser: p_yes)


TOP_TOKENS = 20  # first-token alternatives kept for the p_yes parser


class JudgeClient(Protocol):
    name: str

    def complete(self, conversations: Sequence[list[dict]]) -> list[JudgeReply]: ...


# ---------------------------------------------------------------- in process (transformers)


class LocalJudge:
    """A causal LM judging in this process: its own weights, eval mode, no grad, left-padded batched generate."""

    def __init__(self, model_path: str, max_new_tokens: int = 256, temperature: float = 0.0, batch_size: int = 8,
                 seed: int = 0, device: str | None = None, model=None, tokenizer=None):
        import torch

        from ppokit.models.loading import load_tokenizer, resolve_model_path

        self.name = str(model_path)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if model is None:
            import transformers

            folder = resolve_model_path(model_path)
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
            model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(self.device)
            tokenizer = load_tokenizer(folder, padding_side="left")
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.batch_size, self.seed, self.calls = max(1, batch_size), seed, 0

    def _prompt(self, messages: list[dict]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return "\n\n".join(m["content"] for m in messages) + "\n\n"

    def complete(self, conversations: Sequence[list[dict]]) -> list[JudgeReply]:
        out: list[JudgeReply] = []
        for start in range(0, len(conversations), self.batch_size):
            out.extend(self._generate([self._prompt(c) for c in conversations[start:start + self.batch_size]]))
        return out

    def _generate(self, prompts: list[str]) -> list[JudgeReply]:
        import torch

        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        sample = self.temperature > 0
        options = dict(do_sample=sample, max_new_tokens=self.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id,
                       return_dict_in_generate=True, output_logits=True)
        if sample:
            options.update(temperature=self.temperature, top_p=1.0, top_k=0)
        else:  # greedy: clear any sampling defaults of the model's generation_config
            options.update(temperature=None, top_p=None, top_k=None)
        self.calls += 1
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(self.seed * 1_000_003 + self.calls)
            generated = self.model.generate(**enc, **options)
        new = generated.sequences[:, enc["input_ids"].shape[1]:]
        first = torch.softmax(generated.logits[0].float(), dim=-1).topk(TOP_TOKENS, dim=-1)
        eos = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        replies = []
        for i, (row, mask) in enumerate(zip(new.tolist(), enc["attention_mask"].tolist())):
            probs: dict[str, float] = {}
            for p, t in zip(first.values[i].tolist(), first.indices[i].tolist()):
                word = self.tokenizer.decode([t])
                probs[word] = probs.get(word, 0.0) + p
            kept = []
            for token in row:
                if token in eos:
                    break
                kept.append(token)
            text = self.tokenizer.decode(kept, skip_special_tokens=True)
            replies.append(JudgeReply(text=text, tokens=int(sum(mask)) + len(kept), first_token_probs=probs))
        return replies


# vLLM (judge_backend: vllm): ppokit/rewards/judge/vllm_judge.py


# ---------------------------------------------------------------- OpenAI-compatible HTTP


def is_loopback_url(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def chat_url(url: str) -> str:
    """`http://h:p`, `http://h:p/v1` or the full `.../v1/chat/completions` -> the full endpoint URL."""
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + ("/chat/completions" if url.endswith("/v1") else "/v1/chat/completions")


class HttpJudge:
    """POSTs each conversation to an OpenAI-compatible `/v1/chat/completions`, at most `concurrency` at once.

    Timeouts, connection errors and 5xx answers are retried `max_retries` times (1 s, 2 s, ... apart); a 4xx
    answer is not. What still fails becomes a reply with `error`. The bearer token comes from `token` or the
    PPOKIT_JUDGE_TOKEN environment variable. A URL off this machine is refused unless `allow_remote`.
    """

    def __init__(self, url: str, api_model: str | None = None, max_new_tokens: int = 256, temperature: float = 0.0,
                 seed: int = 0, concurrency: int = 8, timeout: float = 60.0, max_retries: int = 3,
                 token: str | None = None, allow_remote: bool = False, transport=None, backoff: float = 1.0,
                 want_probs: bool = False):
        import httpx

        if not url.startswith(("http://", "https://")):
            raise ValueError(f"judge endpoint {url!r} is not an http(s) URL; give e.g. http://127.0.0.1:8000/v1")
        if not allow_remote and not is_loopback_url(url):
            raise ValueError(f"judge endpoint {url!r} is not on this machine; answers and data would leave it. Set "
                             "judge_allow_remote: true if that is intended")
        self.url, self.name = chat_url(url), url
        token = token or os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(timeout=timeout, headers=headers, transport=transport)
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self.concurrency = max(1, concurrency)
        self.body = {"max_tokens": max_new_tokens, "temperature": temperature, "seed": seed}
        if want_probs:  # judge_parser p_yes: the first token's alternatives (vLLM's and OpenAI's servers give them)
            self.body.update(logprobs=True, top_logprobs=TOP_TOKENS)
        self.api_model = api_model or self._first_model()

    def _first_model(self) -> str:
        """The endpoint's first model id (GET /v1/models), for servers that need `model` and none was named."""
        import httpx

        models_url = self.url[: -len("/chat/completions")] + "/models"
        try:
            resp = self.http.get(models_url)
        except httpx.HTTPError as exc:
            raise ValueError(f"judge endpoint {self.name}: GET {models_url} failed ({type(exc).__name__}: {exc}); "
                             f"{_advice(self.name, error=exc)}") from exc
        if resp.status_code != 200 and resp.status_code != 404:
            raise ValueError(f"judge endpoint {self.name}: GET {models_url} answered HTTP {resp.status_code}: "
                             f"{resp.text[:200]}; {_advice(self.name, status=resp.status_code)}")
        try:
            resp.raise_for_status()
            return str(resp.json()["data"][0]["id"])
        except Exception as exc:  # the endpoint answers but lists no model: name one
            raise ValueError(f"judge endpoint {self.name}: no judge_api_model was given and GET {models_url} did not "
                             f"name one ({type(exc).__name__}: {exc}); set judge_api_model to the served model's "
                             "name") from exc

    def complete(self, conversations: Sequence[list[dict]]) -> list[JudgeReply]:
        if not conversations:
            return []
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(conversations)))
        try:
            return list(pool.map(self._one, conversations))
        finally:  # a stop signal (Ctrl-C, a second SIGTERM) does not wait for the requests in flight
            pool.shutdown(wait=False, cancel_futures=True)

    def _one(self, messages: list[dict]) -> JudgeReply:
        import httpx

        body = {**self.body, "model": self.api_model, "messages": messages}
        why = advice = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff * attempt)
            try:
                resp = self.http.post(self.url, json=body)
            except httpx.TimeoutException as exc:
                why, advice = f"timed out after {self.timeout:g} s", _advice(self.name, error=exc)
                continue
            except httpx.HTTPError as exc:
                why, advice = f"{type(exc).__name__}: {exc}", _advice(self.name, error=exc)
                continue
            if resp.status_code >= 500:
                why, advice = f"HTTP {resp.status_code}: {resp.text[:200]}", _advice(self.name, status=resp.status_code)
                continue
            if resp.status_code >= 400:
                return JudgeReply(error=f"judge endpoint {self.url} answered HTTP {resp.status_code}: "
                                        f"{resp.text[:200]} (not retried); {_advice(self.name, status=resp.status_code)}")
            return _reply(resp, self.url)
        return JudgeReply(error=f"judge endpoint {self.url} failed {self.max_retries + 1} tries, last: {why}; {advice}")


def _advice(url: str, *, status: int | None = None, error: BaseException | None = None) -> str:
    """`endpoint_advice` in the judge's words (its server, its URL key, its token)."""
    from ppokit.rewards.errors import endpoint_advice

    return endpoint_advice(url, status=status, error=error, server="the judge's server", url_key="judge_model",
                           token_key=TOKEN_ENV)


def _reply(resp, url: str) -> JudgeReply:
    try:
        data = resp.json()
        text = data["choices"][0]["message"]["content"]
        usage = data.get("usage") or {}
        tokens = int(usage.get("total_tokens") or (usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)))
    except Exception as exc:
        return JudgeReply(error=f"judge endpoint {url} sent an answer that is not an OpenAI chat completion "
                                f"({type(exc).__name__}: {exc}): {resp.text[:200]}")
    if not isinstance(text, str):
        return JudgeReply(error=f"judge endpoint {url} sent message content {text!r}, not text")
    return JudgeReply(text=text, tokens=tokens, first_token_probs=_first_probs(data))


def _first_probs(data: dict) -> dict[str, float] | None:
    """{token: probability} of the first completion token's top_logprobs, when the endpoint sent them."""
    import math

    try:
        first = data["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        return {str(t["token"]): math.exp(float(t["logprob"])) for t in first}
    except (KeyError, IndexError, TypeError, ValueError):
        return None
