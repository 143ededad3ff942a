"""Slow: GRPO with the multiply tool on the bundled SmolLM2 (config/grpo_tools_argument.json) raises the reward and
the rate of correct tool calls. Minutes per step on a CPU; run with `pytest -m slow tests/tools`."""

import os

import pytest

from ppokit.tasks import get

pytestmark = pytest.mark.slow
STEPS = int(os.environ.get("PPOKIT_TOOL_STEPS", "12"))


def correct_call_rate(batch) -> float:
    """Share of rows whose first call is multiply with the question's operands."""
    hits = 0
    for record, turns in zip(batch.records, batch.turns):
        calls = [c for t in turns if t["role"] == "assistant" for c in t.get("calls", [])]
        fields = record.get("fields") or {}
        hits += bool(calls) and calls[0]["name"] == "multiply" and calls[0]["arguments"] == {
            "a": fields.get("a"), "b": fields.get("b")}
    return hits / max(len(batch), 1)


def test_grpo_with_the_multiply_tool_learns(tmp_path, monkeypatch):
    from ppokit.session import Session

    monkeypatch.chdir(tmp_path)  # data/multiply/ is generated here
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    s = Session.from_json(os.path.join(root, "config", "grpo_tools_argument.json"), max_steps=STEPS,
                          output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), save_strategy="no")
    rewards, calls, correct = [], [], []
    for _ in range(STEPS):
        metrics = s.step()
        rewards.append(metrics["reward/mean"])
        calls.append(metrics["tools/calls_per_sample"])
        correct.append(correct_call_rate(s.last_batch))
    print("reward", rewards, "calls", calls, "correct calls", correct)
    half = STEPS // 2
    assert get("multiply").name == "multiply"
    assert sum(rewards[half:]) > sum(rewards[:half]), rewards
    assert sum(correct[half:]) >= sum(correct[:half]), correct
