"""The reward server app: three protocols, bad input, auth, limits, failures, metrics, bind checks."""

from __future__ import annotations

import json
import threading

import pytest
from fastapi.testclient import TestClient

from ppokit.rewards.cli import check_bind, is_loopback, main
from ppokit.rewards.detect import detect_task
from ppokit.rewards.errors import RewardError
from ppokit.rewards.functions import NamedReward
from ppokit.rewards.scorers import build_scorer, function_scorer, task_scorer
from ppokit.rewards.server import create_app

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def length_scorer(items):
    """score = len(response); details record what the server passed on."""
    return [(float(len(it["response"])), {"n": len(it["response"]), "label": it["label"], "prompt": it["prompt"]})
            for it in items]


@pytest.fixture
def client():
    return TestClient(create_app(length_scorer, token=TOKEN, max_batch=8, max_body_bytes=4096))


def test_paddle_protocol(client):
    body = {"src": ["q1", "q2"], "tgt": ["a1", None], "response": ["abc", "de"]}
    r = client.post("/", json=body, headers=AUTH)
    assert r.status_code == 200
    assert r.json() == {"error_code": 0, "error_msg": "Success", "score": [3.0, 2.0]}


def test_openrlhf_protocol_splits_query_into_prompt_and_response(client):
    body = {"query": ["Q: hi A: abcd", "other text"], "prompts": ["Q: hi A:", "Q: x"], "labels": ["l1", "l2"]}
    r = client.post("/get_reward", json=body, headers=AUTH)
    assert r.status_code == 200
    data = r.json()
    assert data["rewards"] == [5.0, 10.0] == data["scores"]  # " abcd"; a query not starting with its prompt
    assert data["extra_logs"] == {"n": [5.0, 10.0]}
    r = client.post("/get_reward", json={"query": ["xyz"]}, headers=AUTH)
    assert r.json()["rewards"] == [3.0]


def test_native_protocol_returns_details(client):
    items = [{"prompt": "p", "response": "resp", "label": "L", "task": "arithmetic", "fields": {"k": 1}}]
    r = client.post("/v1/score", json={"items": items}, headers=AUTH)
    assert r.status_code == 200
    assert r.json() == {"scores": [4.0], "details": [{"n": 4, "label": "L", "prompt": "p"}]}


def test_empty_batch_is_answered_without_scoring(client):
    r = client.post("/", json={"src": [], "tgt": [], "response": []}, headers=AUTH)
    assert r.json() == {"error_code": 0, "error_msg": "Success", "score": []}


@pytest.mark.parametrize(
    "path, body, status, words",
    [
        ("/", {"src": ["a"], "tgt": ["b"]}, 422, "response"),
        ("/", {"src": ["a", "b"], "tgt": ["b"], "response": ["c"]}, 422, "equal lengths"),
        ("/", {"src": [1], "tgt": ["b"], "response": ["c"]}, 422, "src.0"),
        ("/get_reward", {"query": ["a"], "prompts": ["a", "b"]}, 422, "prompts has 2 entries"),
        ("/v1/score", {"items": [{"prompt": "p"}]}, 422, "items.0.response"),
        ("/v1/score", {"items": [{"prompt": "p", "response": "r", "extra": 1}]}, 422, "extra"),
        ("/", {"src": ["a"] * 9, "tgt": ["b"] * 9, "response": ["c"] * 9}, 413, "at most 8"),
    ],
)
def test_bad_requests_get_4xx_with_a_message(client, path, body, status, words):
    r = client.post(path, json=body, headers=AUTH)
    assert r.status_code == status
    data = r.json()
    assert data["error_code"] == status and words in data["error_msg"]
    assert "score" not in data


def test_non_json_and_oversized_bodies(client):
    r = client.post("/", content=b"src=a", headers={**AUTH, "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and "application/json" in r.json()["error_msg"]
    r = client.post("/", content=b"{not json", headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error_msg"]
    big = json.dumps({"src": ["x" * 5000], "tgt": [""], "response": [""]})
    r = client.post("/", content=big, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413 and "4096 bytes" in r.json()["error_msg"]

    def chunks():  # no Content-Length: the limit holds while streaming
        yield b'{"src": ["'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"], "tgt": [""], "response": [""]}'

    r = client.post("/", content=chunks(), headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}])
def test_missing_or_wrong_token_is_401(client, headers):
    r = client.post("/", json={"src": ["a"], "tgt": ["b"], "response": ["c"]}, headers=headers)
    assert r.status_code == 401
    assert "bearer token" in r.json()["error_msg"] and r.headers["www-authenticate"] == "Bearer"
    assert client.get("/metrics", headers=headers).status_code == 401
    assert client.get("/health").json()["status"] == "ok"


def test_scorer_failure_names_the_item_and_the_server_keeps_serving(fake_tasks):
    _, get = fake_tasks

    def flaky_fn(prompts, responses, **_):
        return [float("nan") if r == "bad" else 1.0 for r in responses]

    app = create_app(function_scorer(NamedReward("flaky_fn", flaky_fn)))
    with TestClient(app) as c:
        r = c.post("/", json={"src": ["a", "b", "c"], "tgt": ["", "", ""], "response": ["ok", "ok", "bad"]})
        assert r.status_code == 500
        msg = r.json()["error_msg"]
        assert "item 2" in msg and "flaky_fn" in msg and r.json()["error_code"] == 500
        r = c.post("/", json={"src": ["a"], "tgt": [""], "response": ["ok"]})
        assert r.status_code == 200 and r.json()["score"] == [1.0]

    def raising(items):
        raise RewardError("item 1 could not be parsed", index=1)

    with TestClient(create_app(raising)) as c:
        r = c.post("/v1/score", json={"items": [{"prompt": "p", "response": "r"}] * 2})
        assert r.status_code == 500 and "item 1" in r.json()["error_msg"]


def test_slow_scoring_is_504_and_later_requests_still_work():
    release = threading.Event()

    def blocking(items):
        if items[0]["response"] == "slow":
            release.wait(timeout=30)
        return [(1.0, {}) for _ in items]

    with TestClient(create_app(blocking, request_timeout=0.05)) as c:
        try:
            r = c.post("/", json={"src": ["a"], "tgt": [""], "response": ["slow"]})
            assert r.status_code == 504 and "request timeout" in r.json()["error_msg"]
        finally:
            release.set()
        assert c.post("/", json={"src": ["a"], "tgt": [""], "response": ["fast"]}).json()["score"] == [1.0]


def test_metrics_count_requests_items_errors_and_latency(client):
    for n in (1, 2, 3):
        client.post("/", json={"src": ["a"] * n, "tgt": ["b"] * n, "response": ["c"] * n}, headers=AUTH)
    client.post("/", json={"src": ["a"]}, headers=AUTH)
    m = client.get("/metrics", headers=AUTH).json()
    assert (m["requests"], m["items"], m["errors"]) == (4, 6, 1)
    assert m["status"] == {"200": 3, "422": 1}
    lat = m["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p90"] <= lat["p99"]


def test_unknown_path_uses_the_same_error_shape(client):
    r = client.post("/nope", json={}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error_code"] == 404


# ---------------------------------------------------------------- default task scorer


KK_PROMPT = ("<|im_start|>user\nA very special island is inhabited only by knights and knaves. Knights always "
             "tell the truth, and knaves always lie. You meet 2 inhabitants: Zoey and Oliver.<|im_end|>")


@pytest.mark.parametrize(
    "prompt, label, task",
    [
        (KK_PROMPT, "(1) Zoey is a knight\n(2) Oliver is a knave", "knights_knaves"),
        ("Who is who?", "(1) Zoey is a knight\n(2) Oliver is a knave", "knights_knaves"),
        ("Using the numbers [3, 5, 7], create an equation that equals 22.", "22", "countdown"),
        ("Countdown: reach 100 with 25 50 75", "100", "countdown"),
        ("Using the numbers [17, 18, 18], make 53.", None, "countdown"),
        ("Make 9 from what you have.", "20 - (14 - (21 - 18)) = 9", "countdown"),
        ("What is 5 + 2? Answer with just the number.", "7", "arithmetic"),
        ("What is (3 - 1) * 2?", "-4", "arithmetic"),
        ("Sum the numbers 3 and 4.", "7", "arithmetic"),
        ("What is 12 + 30?", "42", "arithmetic"),
        ("Compute 7 * 6. The night is long.", "42", "arithmetic"),
    ],
)
def test_detect_task(prompt, label, task):
    assert detect_task(prompt, label) == task


def test_default_scorer_routes_paddle_items_by_detected_task(fake_tasks):
    registry, get = fake_tasks
    app = create_app(task_scorer(get_task=get))
    body = {"src": [KK_PROMPT, "What is 1+1?", "Using the numbers [1, 2], make an equation that equals 3"],
            "tgt": ["(1) Zoey is a knight", "2", "3"],
            "response": ["(1) Zoey is a knight", "3", "1+2"]}
    with TestClient(app) as c:
        assert c.post("/", json=body).json()["score"] == [3.0, 0.0, 10.0]
        r = c.post("/v1/score", json={"items": [{"prompt": "What is 1+1?", "response": "2", "label": "2",
                                                 "task": "knights_knaves"}]})
        assert r.json()["scores"] == [3.0]  # an explicit task wins over detection
        assert r.json()["details"][0]["task"] == "knights_knaves" and r.json()["details"][0]["match"] is True
    assert registry["knights_knaves"].seen[0]["source"] == "request item 0"


def test_fixed_task_scorer_and_unknown_task(fake_tasks):
    _, get = fake_tasks
    with TestClient(create_app(build_scorer(task="arithmetic", get_task=get))) as c:
        assert c.post("/", json={"src": [KK_PROMPT], "tgt": ["x"], "response": ["x"]}).json()["score"] == [1.0]
    with pytest.raises(KeyError, match="sudoku"):
        build_scorer(task="sudoku", get_task=get)
    with pytest.raises(RewardError, match="choose one scorer"):
        build_scorer(task="arithmetic", model="/m")


def test_function_scorer_from_file(tmp_path):
    (tmp_path / "fn.py").write_text("def score(prompts, responses, label, **kw):\n"
                                    "    return [float(r == l) for r, l in zip(responses, label)]\n")
    with TestClient(create_app(build_scorer(function=f"{tmp_path}/fn.py:score"))) as c:
        r = c.post("/", json={"src": ["a", "b"], "tgt": ["x", "y"], "response": ["x", "z"]})
        assert r.json()["score"] == [1.0, 0.0]


# ---------------------------------------------------------------- bind policy


@pytest.mark.parametrize("host, loop", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True),
                                        ("::1", True), ("0.0.0.0", False), ("::", False),
                                        ("192.168.1.5", False), ("example.com", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_non_loopback_bind_needs_a_token_or_insecure():
    check_bind("127.0.0.1", None, False)
    check_bind("0.0.0.0", "a-token-of-16-chars", False)
    check_bind("0.0.0.0", None, True)
    with pytest.raises(ValueError, match="refusing to listen on '0.0.0.0' without a token"):
        check_bind("0.0.0.0", None, False)


def test_cli_refuses_before_binding(monkeypatch, capsys):
    monkeypatch.delenv("PPOKIT_REWARD_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["--host", "0.0.0.0", "--port", "1"])
    assert exit_.value.code == 2 and "--insecure" in capsys.readouterr().err
