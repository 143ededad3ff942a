"""PaddleNLP's rule reward and reward-server sample: gsm8k answers ("#### 72") scored, the task detected per
record, error bodies PaddleNLP's client can read; gsm8k answers on hand-made strings."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from ppokit.rewards.detect import detect_task
from ppokit.rewards.functions import NamedReward, compute_rewards, make_rule_reward
from ppokit.rewards.scorers import build_scorer
from ppokit.rewards.server import create_app
from ppokit.tasks import get
from ppokit.tasks.math_answer import gsm8k_answer, gsm8k_score

# The shape of PaddleNLP's client.py sample (its own sentences are not copied): gsm8k solutions as tgt.
CLIENT_SAMPLE = {
    "src": ["A baker made 36 rolls in the morning and half as many at night. ",
            "Tom pays $3 for each of 4 notebooks. How much"],
    "tgt": ["At night: 36/2 = 18. Total 36 + 18 = 54. #### 54", "4 x 3 = $12. #### 12"],
    "response": ["He baked 36 + 18 = 54 rolls in all. #### 54", "7"],
}


def test_paddlenlp_client_sample_is_scored_by_the_default_server():
    client = TestClient(create_app(build_scorer()))
    r = client.post("/", json=CLIENT_SAMPLE)
    assert r.status_code == 200, r.text
    assert r.json() == {"error_code": 0, "error_msg": "Success", "score": [1.0, 0.0]}


@pytest.mark.parametrize(("body", "status"), [
    ({"src": ["a"], "tgt": ["#### 1"]}, 422),  # no response list
    ({"src": ["a", "b"], "tgt": ["#### 1"], "response": ["1"]}, 422),  # lengths differ
    ({"src": ["a"], "tgt": ["#### x"], "response": ["1"]}, 500),  # reference without a number: the scorer fails
])
def test_errors_keep_the_status_and_carry_paddlenlp_fields(body, status):
    r = TestClient(create_app(build_scorer())).post("/", json=body)
    data = r.json()
    assert r.status_code == status and data["error_code"] == status
    assert isinstance(data["error_msg"], str) and data["error_msg"] and "score" not in data  # never zeros


def test_an_unexpected_server_failure_is_a_500_with_the_paddlenlp_body():
    def broken(items):
        raise SystemError("disk on fire")  # not a RewardError, not caught by the scorer wrapper's own types

    app = create_app(build_scorer())
    app.add_api_route("/boom", lambda: broken([]), methods=["GET"])
    r = TestClient(app, raise_server_exceptions=False).get("/boom")
    assert r.status_code == 500 and r.json() == {"error_code": 500, "error_msg": "the server failed: SystemError: disk on fire"}


def test_detect_task_reads_gsm8k_labels():
    assert detect_task("Natalie has 3 apples", "She has 3 + 4 = 7. #### 7") == "gsm8k"
    assert detect_task("What is 3 + 5?", "8") == "arithmetic"
    assert detect_task("Knights and knaves live here", "#### 3") == "knights_knaves"


def rows(*pairs):
    return [{"prompt": p, "label": label, "source": f"d.jsonl:{i + 1}", "fields": {}} for i, (p, label) in enumerate(pairs)]


def test_rule_reward_without_task_scores_gsm8k_kk_and_numbers():
    kk_label = "(1) Zoey is a knight\n(2) Oliver is a knave"
    records = rows(("A farm has 12 cows ...", "12 + 30 = 42 cows. #### 42"),
                   ("A farm has 12 cows ...", "#### 42"),
                   ("Zoey and Oliver are knights or knaves ...", kk_label),
                   ("What is 2 + 2?", "4"))
    responses = ["So the farm has 42 cows. #### 42",
                 "The farm has \\boxed{41} cows",
                 f"r</think><answer>{kk_label}</answer>",
                 "The answer is 4."]
    rule = NamedReward("rule", make_rule_reward())  # no default task, no 'task' field
    total, _ = compute_rewards([rule], [r["prompt"] for r in records], responses, records)
    assert total.tolist() == [1.0, 0.0, 3.0, 1.0]


def test_gsm8k_task_scores_strictly_after_the_last_marker():
    task = get("gsm8k")
    record = {"label": "3 + 4 = 7\n#### 7", "source": "g.jsonl:1"}
    assert task.score("#### 7", record) == 1.0 and task.score(task.solution(record), record) == task.max_score
    assert task.score("#### 8", record) == 0.0
    assert task.score("3 + 4 = 7", record) == 0.0  # no '####': strict, as PaddleNLP's rule reward and verl


@pytest.mark.parametrize(("text", "answer"), [
    ("so 24 + 48 = 72\n#### 72", "72"),
    ("#### 1,234", "1234"),
    ("#### $18", "18"),
    ("first #### 3 then #### -4.5", "-4.5"),
    ("no marker 72", None),
])
def test_gsm8k_answer(text, answer):
    assert gsm8k_answer(text) == answer


@pytest.mark.parametrize(("response", "truth", "score"), [
    ("work... #### 72", "#### 72", 1.0),
    ("work... #### 72", "72", 1.0),
    ("the total is \\boxed{72}", "... #### 72", 0.0),  # strict: no '####', no score (PaddleNLP, verl)
    ("72 apples", "#### 72", 0.0),
    ("#### 72.00", "#### 72", 1.0),
    ("#### 71", "#### 72", 0.0),
    ("", "#### 72", 0.0),
])
def test_gsm8k_score(response, truth, score):
    assert gsm8k_score(response, truth) == score
