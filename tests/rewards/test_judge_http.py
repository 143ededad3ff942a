"""The judge on an OpenAI-compatible endpoint: a fake server on 127.0.0.1, httpx MockTransport for failures, and
`reward_server.py --judge` answering PaddleNLP's protocol with it."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from ppokit.rewards.cli import _spec, app_from_spec, build_parser
from ppokit.rewards.judge.clients import HttpJudge, chat_url


def fake_openai(verdict=lambda user: "Score: 10" if "Answer to grade:\n4" in user else "Score: 1"):
    """A tiny OpenAI-compatible server; `app.state.peak` is the most requests it held at once."""
    app = FastAPI()
    app.state.inflight = app.state.peak = 0
    app.state.bodies = []
    lock = threading.Lock()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "fake-judge", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        with lock:
            app.state.inflight += 1
            app.state.peak = max(app.state.peak, app.state.inflight)
            app.state.bodies.append(body)
        await asyncio.sleep(0.3)  # hold the request so concurrent ones overlap
        with lock:
            app.state.inflight -= 1
        text = verdict(body["messages"][-1]["content"])
        return {"id": "x", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}}

    return app


def conv(answer: str) -> list[dict]:
    return [{"role": "user", "content": f"Question:\n2+2?\n\nAnswer to grade:\n{answer}"}]


def test_chat_url_forms():
    for url in ("http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1",
                "http://127.0.0.1:8000/v1/chat/completions"):
        assert chat_url(url) == "http://127.0.0.1:8000/v1/chat/completions"


def test_endpoint_on_loopback_with_bounded_concurrency(live_server):
    app = fake_openai()
    with live_server(app) as url:
        client = HttpJudge(url + "/v1", concurrency=2, timeout=10)
        replies = client.complete([conv("4"), conv("5")] * 3)
    assert client.api_model == "fake-judge"  # found through GET /v1/models
    assert [r.text for r in replies] == ["Score: 10", "Score: 1"] * 3 and all(r.tokens == 35 for r in replies)
    assert app.state.peak == 2  # concurrency used, and bounded
    body = app.state.bodies[0]
    assert body["temperature"] == 0.0 and body["model"] == "fake-judge" and body["max_tokens"] == 256


def test_remote_endpoint_needs_allow_remote():
    with pytest.raises(ValueError, match="judge_allow_remote"):
        HttpJudge("http://10.1.2.3:8000/v1", api_model="m")
    HttpJudge("http://10.1.2.3:8000/v1", api_model="m", allow_remote=True)  # refused only by the rule above


def _mock(handler, **kw) -> HttpJudge:
    return HttpJudge("http://127.0.0.1:1/v1", api_model="m", transport=httpx.MockTransport(handler), backoff=0.0, **kw)


def _ok(text="Score: 6"):
    return httpx.Response(200, json={"choices": [{"message": {"content": text}}], "usage": {"total_tokens": 7}})


def test_5xx_and_timeouts_are_retried_then_reported():
    calls = []

    def flaky(request):
        calls.append(1)
        return httpx.Response(503, text="busy") if len(calls) < 3 else _ok()

    assert _mock(flaky, max_retries=3).complete([conv("4")])[0].text == "Score: 6" and len(calls) == 3

    def hangs(request):
        raise httpx.ReadTimeout("slow", request=request)

    reply = _mock(hangs, max_retries=2, timeout=1.5).complete([conv("4")])[0]
    assert reply.error and "failed 3 tries" in reply.error and "timed out after 1.5 s" in reply.error


def test_p_yes_asks_the_endpoint_for_top_logprobs():
    import json
    import math

    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        top = [{"token": "Yes", "logprob": math.log(0.6)}, {"token": "No", "logprob": math.log(0.2)}]
        return httpx.Response(200, json={"choices": [{"message": {"content": "Yes"},
                                                      "logprobs": {"content": [{"token": "Yes", "top_logprobs": top}]}}]})

    reply = _mock(handler, want_probs=True).complete([conv("4")])[0]
    assert seen[0]["logprobs"] is True and seen[0]["top_logprobs"] == 20
    assert reply.first_token_probs == pytest.approx({"Yes": 0.6, "No": 0.2})
    assert "logprobs" not in _mock_body()


def _mock_body():
    seen = []
    _mock(lambda r: seen.append(r.content) or _ok()).complete([conv("4")])
    import json

    return json.loads(seen[0])


def test_4xx_is_not_retried_and_a_malformed_answer_is_an_error():
    calls = []

    def not_found(request):
        calls.append(1)
        return httpx.Response(404, text="model 'm' does not exist")

    reply = _mock(not_found).complete([conv("4")])[0]
    assert len(calls) == 1 and "HTTP 404" in reply.error and "not retried" in reply.error
    bad = _mock(lambda r: httpx.Response(200, json={"choices": []})).complete([conv("4")])[0]
    assert "not an OpenAI chat completion" in bad.error


def test_reward_server_with_judge_answers_paddle_protocol(live_server):
    with live_server(fake_openai()) as url:
        ns = build_parser().parse_args(["--judge", url, "--judge-concurrency", "3"])
        app = app_from_spec(_spec(ns))
        with TestClient(app) as http:
            resp = http.post("/", json={"src": ["2+2?", "2+2?"], "tgt": ["4", "4"], "response": ["4", "5"]})
            assert resp.status_code == 200, resp.text
            assert resp.json()["score"] == [1.0, 0.0]
            native = http.post("/v1/score", json={"items": [{"prompt": "2+2?", "response": "4", "label": "4"}]})
            assert native.status_code == 200, native.text
            assert native.json()["details"][0]["judge_verdict"] == "Score: 10"


def test_reward_server_judge_unparsed_is_a_500_naming_the_item(live_server):
    with live_server(fake_openai(verdict=lambda user: "no idea")) as url:
        app = app_from_spec(_spec(build_parser().parse_args(["--judge", url])))
        with TestClient(app) as http:
            resp = http.post("/", json={"src": ["q"], "tgt": ["a"], "response": ["a"]})
    assert resp.status_code == 500 and "unparsed" in resp.text and "no idea" in resp.text
