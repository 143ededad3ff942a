"""The reward server client over real loopback sockets: batching, retries, errors, skip mode, threads."""

from __future__ import annotations

import json as json_mod
import math
import threading

import httpx
import pytest

from ppokit.rewards import NamedReward, RewardServerError, compute_rewards, skipped_groups
from ppokit.rewards.client import RewardServerClient
from ppokit.rewards.scorers import task_scorer
from ppokit.rewards.server import create_app

TOKEN = "tok-123"


class CountingScorer:
    """score = len(prompt) * 100 + len(response); fails the first `fail_first` calls and any batch
    whose label list contains 'boom'. Thread-safe counting."""

    def __init__(self, fail_first: int = 0):
        self.fail_first = fail_first
        self.calls = 0
        self.items = 0
        self.lock = threading.Lock()

    def __call__(self, items):
        with self.lock:
            self.calls += 1
            self.items += len(items)
            call = self.calls
        if call <= self.fail_first:
            raise RuntimeError(f"transient failure {call}")
        if any(it["label"] == "boom" for it in items):
            raise RuntimeError("boom label")
        return [(float(len(it["prompt"]) * 100 + len(it["response"])), {}) for it in items]


def expected(prompts, responses):
    return [float(len(p) * 100 + len(r)) for p, r in zip(prompts, responses)]


def test_batches_concurrently_and_keeps_order(live_server):
    scorer = CountingScorer()
    prompts = [f"p{'x' * i}" for i in range(10)]
    responses = [f"{'y' * (i % 4)}" for i in range(10)]
    with live_server(create_app(scorer, token=TOKEN)) as url:
        with RewardServerClient(url, token=TOKEN, batch_size=3, concurrency=4) as client:
            assert client(prompts, responses, label=["l"] * 10) == expected(prompts, responses)
    assert scorer.calls == 4 and scorer.items == 10
    # empty input sends nothing
    assert RewardServerClient("http://127.0.0.1:1")([], []) == []


def test_server_failing_twice_then_succeeding(live_server):
    scorer = CountingScorer(fail_first=2)
    with live_server(create_app(scorer)) as url:
        client = RewardServerClient(url, max_retries=3, backoff=0.001)
        assert client(["ab"], ["cde"], label=["x"]) == [203.0]
    assert scorer.calls == 3


def test_dead_server_raises_after_the_retries(closed_port_url):
    client = RewardServerClient(closed_port_url, max_retries=2, backoff=0.001, timeout=5)
    with pytest.raises(RewardServerError) as err:
        client(["p"], ["r"])
    msg = str(err.value)
    assert closed_port_url in msg and "after 3 attempts" in msg and "ConnectError" in msg
    assert err.value.attempts == 3 and err.value.status is None


def test_persistent_5xx_raises_with_the_servers_message(live_server):
    scorer = CountingScorer()
    with live_server(create_app(scorer)) as url:
        client = RewardServerClient(url, max_retries=1, backoff=0.001)
        with pytest.raises(RewardServerError, match="after 2 attempts; last error: HTTP 500: .*boom label"):
            client(["p"], ["r"], label=["boom"])
    assert scorer.calls == 2


def test_4xx_is_not_retried_and_carries_the_message(live_server, monkeypatch):
    monkeypatch.delenv("PPOKIT_REWARD_TOKEN", raising=False)
    scorer = CountingScorer()
    app = create_app(scorer, token=TOKEN)
    with live_server(app) as url:
        client = RewardServerClient(url, token="wrong", max_retries=3, backoff=0.001)
        with pytest.raises(RewardServerError) as err:
            client(["p"], ["r"])
        assert err.value.status == 401 and err.value.attempts == 1 and "bearer token" in str(err.value)
        with pytest.raises(RewardServerError, match="HTTP 401"):  # 4xx is raised in skip mode too
            client.score_or_none(["p"], ["r"])
        monkeypatch.setenv("PPOKIT_REWARD_TOKEN", TOKEN)  # the token may come from the environment
        assert RewardServerClient(url)(["p"], ["r"]) == [101.0]
    assert scorer.calls == 1 and app.state.metrics.snapshot()["status"] == {"200": 1, "401": 2}


def test_score_or_none_marks_only_the_failed_batch(live_server):
    scorer = CountingScorer()
    labels = ["a", "b", "c", "boom", "e", "f"]
    prompts, responses = ["p"] * 6, ["r"] * 6
    with live_server(create_app(scorer)) as url:
        client = RewardServerClient(url, batch_size=2, max_retries=1, backoff=0.001)
        scores = client.score_or_none(prompts, responses, label=labels)
        assert scores == [101.0, 101.0, None, None, 101.0, 101.0]
        records = [{"label": x, "source": f"d:{i}"} for i, x in enumerate(labels)]
        fn = NamedReward("reward_server", client.score_or_none, allow_none=True, locate_errors=False)
        total, _ = compute_rewards([fn], prompts, responses, records)
        keep, dropped = skipped_groups(total, group_size=2)
        assert math.isnan(total[3]) and keep.tolist() == [True, True, False, False, True, True] and dropped == 1
        keep, dropped = skipped_groups(total, group_size=3)  # the failed batch straddles both groups
        assert keep.tolist() == [False] * 6 and dropped == 2
        with pytest.raises(RewardServerError):  # the plain call never returns placeholders
            client(prompts, responses, label=labels)


def test_score_or_none_against_a_dead_server(closed_port_url):
    client = RewardServerClient(closed_port_url, batch_size=2, max_retries=0)
    assert client.score_or_none(["p"] * 3, ["r"] * 3) == [None, None, None]


def test_200_requests_from_8_threads(live_server):
    scorer = CountingScorer()
    errors: list[BaseException] = []
    with live_server(create_app(scorer, token=TOKEN)) as url:
        client = RewardServerClient(url, token=TOKEN, batch_size=4)

        def worker(t):
            try:
                for k in range(25):
                    prompts = [f"t{t}k{k}" + "z" * j for j in range(5)]
                    responses = ["w" * (t + k + j) for j in range(5)]
                    got = client(prompts, responses, label=[""] * 5)
                    assert got == expected(prompts, responses), (t, k, got)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
    assert not errors, errors[:3]
    assert scorer.items == 8 * 25 * 5 and scorer.calls == 8 * 25 * 2  # 5 items in batches of 4


def test_native_protocol_carries_task_and_fields(live_server, fake_tasks):
    registry, get = fake_tasks
    with live_server(create_app(task_scorer(get_task=get))) as url:
        client = RewardServerClient(url, protocol="native")
        records = [{"label": "x", "task": "countdown", "fields": {"nums": [1, 2]}},
                   {"label": "y", "task": "arithmetic", "fields": {}}]
        got = client(["What is 1+1?", "What?"], ["x", "n"], label=["x", "y"], task=["countdown", "arithmetic"],
                     records=records)
    assert got == [11.0, 0.0]
    assert registry["countdown"].seen[0]["fields"] == {"nums": [1, 2]}


def mock(handler):
    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    "answer, words",
    [
        ({"error_code": 7, "error_msg": "scorer down", "score": []}, "error_code 7: scorer down"),
        ({"error_code": 0, "score": [1.0]}, "sent 1 scores for 2 responses"),
        ({"error_code": 0, "score": [1.0, "x"]}, "score 'x' for item 1"),
        ({"error_code": 0}, "no 'score' list"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_malformed_answers_raise_at_once(answer, words):
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(200, json=answer)

    client = RewardServerClient("http://reward.test", transport=mock(handler), backoff=0.001)
    with pytest.raises(RewardServerError, match=words):
        client(["a", "b"], ["c", "d"])
    assert len(calls) == 1


def test_paddle_request_shape_and_429_retry():
    seen = []

    def handler(request):
        seen.append(request)
        if len(seen) == 1:
            return httpx.Response(429, json={"error_msg": "slow down"})
        return httpx.Response(200, json={"error_code": 0, "error_msg": "Success", "score": [0.5]})

    client = RewardServerClient("http://reward.test:8731", token="abc", transport=mock(handler), backoff=0.001)
    assert client(["prompt"], ["resp"], label=[None]) == [0.5]
    assert len(seen) == 2 and str(seen[1].url) == "http://reward.test:8731"
    assert seen[1].headers["authorization"] == "Bearer abc"
    assert json_mod.loads(seen[1].content) == {"src": ["prompt"], "tgt": [""], "response": ["resp"]}


def test_bad_client_settings_are_clear():
    with pytest.raises(RewardServerError, match="not an http"):
        RewardServerClient("127.0.0.1:8731")
    with pytest.raises(RewardServerError, match="protocol 'grpc'"):
        RewardServerClient("http://x", protocol="grpc")
