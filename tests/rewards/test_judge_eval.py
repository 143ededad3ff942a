"""An evaluation with a judge reward: the judge's counts and cost under eval names, its verdicts in the eval rows,
unscored prompts (reward_on_error: skip_group) counted and kept out of the metrics."""

from __future__ import annotations

import json
import math

import pytest

from ppokit.args import load_arguments
from ppokit.rewards import NamedReward
from ppokit.rewards.judge import JudgeReward
from ppokit.rewards.judge.clients import JudgeReply
from ppokit.rewards.judge.templates import load_template
from ppokit.session import Session
from ppokit.training.evaluate import eval_metric_names, evaluate


class Letters:
    """Scores an answer by its length (Score: 1 + len % 10), in 7 tokens; with `fail_every`, every such call's
    verdict is unparsable."""

    name = "letters"

    def __init__(self, fail_every: int = 0):
        self.fail_every, self.calls = fail_every, 0

    def complete(self, conversations):
        out = []
        for messages in conversations:
            self.calls += 1
            answer = messages[-1]["content"].split("Answer to grade:\n", 1)[1].rsplit("\n\nRate the answer", 1)[0]
            bad = self.fail_every and self.calls % self.fail_every == 0
            text = "I cannot tell." if bad else f"{len(answer)} characters.\nScore: {1 + len(answer) % 10}"
            out.append(JudgeReply(text=text, tokens=7))
        return out


def session(model_dir: str, tmp_path, client, on_error: str = "raise") -> Session:
    rows = [{"src": f"say {i}:", "tgt": str(i)} for i in range(14)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:8]))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[8:]))
    args = load_arguments(overrides=dict(
        actor_model_name_or_path=model_dir, train_datasets=str(tmp_path / "train.jsonl"),
        eval_datasets=str(tmp_path / "eval.jsonl"), eval_rollout_n=2, eval_temperature=1.0,
        per_device_eval_batch_size=4, rl_algorithm="grpo", global_batch_size=2, rollout_n=2,
        global_mini_batch_size=2, per_device_train_batch_size=4, max_dec_len=6, max_prompt_len=32, max_length=64,
        max_steps=1, kl_loss_coeff=0.0, output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"),
        seed=1, disable_tqdm=True, save_strategy="no", logging_steps=1, device="cpu", reward_on_error=on_error))
    judge = JudgeReward(client, load_template("score_10"), on_error=on_error)
    return Session(args, reward_functions=[NamedReward(name="judge", fn=judge, allow_none=on_error == "skip_group",
                                                       locate_errors=False)])


def test_eval_metric_names_keep_eval_apart_from_training():
    assert eval_metric_names({"reward/judge_unparsed": 1.0, "reward/judge_errors": 0.0, "timing/judge_s": 2.5,
                              "judge/tokens": 70.0, "judge/calls": 10.0, "skipped_groups": 1.0}) == {
        "eval/judge_unparsed": 1.0, "eval/judge_errors": 0.0, "timing/eval_judge_s": 2.5,
        "eval/judge_tokens": 70.0, "eval/judge_calls": 10.0, "eval/skipped_groups": 1.0}


def test_evaluation_logs_the_judges_counts_and_cost_and_keeps_its_verdicts(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, Letters())
    try:
        rows: list[dict] = []
        metrics = evaluate(s.producer, samples=rows)
        # 6 eval prompts x 2 responses, one score_10 call each
        assert metrics["eval/judge_calls"] == 12 and metrics["eval/judge_tokens"] == 12 * 7
        assert metrics["eval/judge_unparsed"] == 0 and metrics["eval/judge_errors"] == 0
        assert metrics["timing/eval_judge_s"] >= 0 and "eval/skipped_groups" not in metrics
        assert not any(k.startswith(("reward/", "judge/")) or k == "timing/judge_s" for k in metrics)
        assert len(rows) == 12
        for row in rows:  # the verdict beside the answer it judged, and the judge's score as the row's reward
            assert row["judge_verdict"] == f"{len(row['response'])} characters.\nScore: {1 + len(row['response']) % 10}"
            assert row["reward/judge"] == row["reward"] == pytest.approx((len(row["response"]) % 10) / 9)  # float32
        assert metrics["eval/mean@2"] == pytest.approx(sum(r["reward"] for r in rows) / 12)

        logged = s.evaluate()  # the Session's evaluation logs the same names
        assert logged["eval/judge_calls"] == 12
        last = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[-1])
        assert last["eval/judge_calls"] == 12 and "timing/eval_judge_s" in last
        step = s.step()  # the evaluation's report was taken: the step counts only its own 4 answers
        assert step["judge/calls"] == 4 and step["reward/judge_unparsed"] == 0
    finally:
        s.close()


def test_unscored_eval_prompts_are_counted_and_left_out_of_the_metrics(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, Letters(fail_every=5), on_error="skip_group")
    try:
        rows: list[dict] = []
        metrics = evaluate(s.producer, samples=rows)
    finally:
        s.close()
    assert metrics["eval/judge_unparsed"] == 2  # calls 5 and 10 of 12
    unscored = [r for r in rows if math.isnan(r["reward"])]
    assert [r["judge_verdict"] for r in unscored] == ["I cannot tell."] * 2
    # call 5 is an answer to eval prompt 2 (0-based; 4 prompts x 2 answers per generation call), call 10 to prompt 4
    assert metrics["eval/skipped_groups"] == 2
    kept = [r["reward"] for i, r in enumerate(rows) if i // 2 not in (2, 4)]
    assert len(kept) == 8 and all(not math.isnan(x) for x in kept)
    assert metrics["eval/mean@2"] == pytest.approx(sum(kept) / 8)
