"""The sequence-classification reward model: batched scoring equals one-at-a-time, served over HTTP."""

from __future__ import annotations

import pytest
import torch
from fastapi.testclient import TestClient

from ppokit.rewards import RewardError
from ppokit.rewards.model_reward import ModelReward
from ppokit.rewards.scorers import build_scorer
from ppokit.rewards.server import create_app
from ppokit.testing import tiny_model_config, tiny_tokenizer


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory):
    from transformers import AutoModelForSequenceClassification

    path = tmp_path_factory.mktemp("rm")
    tokenizer = tiny_tokenizer()
    config = tiny_model_config(tokenizer)
    config.num_labels = 1
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


PROMPTS = ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "short", "a much longer prompt here"]
RESPONSES = ["hello there", "x", "an answer of some length"]


def test_batched_scores_equal_single_scores(rm_path):
    batched = ModelReward(rm_path, batch_size=3, device="cpu")
    single = ModelReward(rm_path, batch_size=1, device="cpu")
    got = batched(PROMPTS, RESPONSES)
    assert len(got) == 3 and len(set(got)) == 3
    assert got == pytest.approx(single(PROMPTS, RESPONSES), abs=1e-5)
    assert not batched.model.training
    assert batched(PROMPTS, RESPONSES) == got  # deterministic


def test_model_scorer_over_the_paddle_protocol(rm_path):
    expected = ModelReward(rm_path, device="cpu")(PROMPTS, RESPONSES)
    with TestClient(create_app(build_scorer(model=rm_path))) as c:
        r = c.post("/", json={"src": PROMPTS, "tgt": [""] * 3, "response": RESPONSES})
    assert r.status_code == 200 and r.json()["score"] == pytest.approx(expected, abs=1e-5)


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(RewardError, match="cannot load a sequence-classification reward model"):
        ModelReward(str(tmp_path / "nowhere"))
