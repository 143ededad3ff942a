"""Task verdicts for pass@k / maj@k, and `python -m ppokit.eval` (the same code as Session.evaluate)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from eval_helpers import write_jsonl

from ppokit import tasks
from ppokit.args import load_arguments
from ppokit.data import row_to_record
from ppokit.eval import build_parser, format_table, main, run
from ppokit.session import Session
from ppokit.training.evaluate import evaluate, judge, summarize


def record(task: str, seed: int = 0) -> dict:
    row = tasks.get(task).generate(1, seed=seed)[0]
    return row_to_record(row, f"{task}:0")[0]


def test_arithmetic_verdicts_carry_the_extracted_answer():
    rec = record("arithmetic")
    right = rec["label"]
    assert judge(rec, f"The answer is {right}.", 1.0) == (True, right)
    assert judge(rec, f"I think {int(right) + 1}", 0.0) == (False, str(int(right) + 1))
    assert judge(rec, "no idea", 0.0) == (False, None)


def test_partial_credit_is_not_correct():
    rec = record("countdown")
    numbers = rec["fields"]["numbers"]
    wrong = f"<answer>{numbers[0]} - {numbers[0]}</answer>"  # well formed, wrong value: format credit only
    score = tasks.get("countdown").score(wrong, rec)
    assert 0.0 < score < 1.0
    assert judge(rec, wrong, score)[0] is False
    assert judge(rec, tasks.get("countdown").solution(rec), 1.0)[0] is True


def test_knights_and_knaves_answers_compare_as_text():
    rec = record("knights_knaves")
    correct, answer = judge(rec, tasks.get("knights_knaves").solution(rec), 3.0)
    assert correct is True and isinstance(answer, str) and "knight" in answer
    assert hash(answer) == hash(judge(rec, tasks.get("knights_knaves").solution(rec), 3.0)[1])


def test_records_without_a_task_are_correct_when_rewarded():
    assert judge({"task": None}, "anything", 0.5) == (True, None)
    assert judge({"task": None}, "anything", 0.0) == (False, None)


def test_metrics_per_task_and_majority_only_where_answers_compare():
    groups = {
        "arithmetic": [([1.0, 0.0, 1.0], [True, False, True], ["7", "8", "7"])],
        "custom": [([0.0, 0.0, 1.0], [False, False, True], [None, None, None])],
    }
    m = summarize(groups, k=2)
    assert m["eval/arithmetic/maj@3"] == 1.0 and "eval/custom/maj@3" not in m
    assert m["eval/custom/pass@1"] == pytest.approx(1 / 3)
    assert m["eval/custom/pass@2"] == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2)
    assert m["eval/pass@2"] == pytest.approx((1.0 + 2 / 3) / 2)
    table = format_table(m, {"arithmetic": 1, "custom": 1}).splitlines()
    assert table[0].split() == ["task", "prompts", "mean@3", "pass@1", "pass@2", "maj@3", "accuracy"]
    assert [line.split()[:2] for line in table[1:]] == [["all", "2"], ["arithmetic", "1"], ["custom", "1"]]
    assert table[3].split()[5] == "-"  # custom has no maj@3


def arithmetic_files(tmp_path):
    rows = tasks.get("arithmetic").generate(12, seed=5)
    train = write_jsonl(tmp_path / "train.jsonl", rows[:8])
    test = write_jsonl(tmp_path / "test.jsonl", rows[8:])
    return train, test


def test_cli_gives_the_same_metrics_as_session_evaluate(tiny_model_dir, tmp_path, capsys):
    train, test = arithmetic_files(tmp_path)
    s = Session(load_arguments(None, overrides=dict(
        actor_model_name_or_path=tiny_model_dir, train_datasets=train, eval_datasets=test, use_rule_reward=True,
        global_batch_size=2, rollout_n=2, global_mini_batch_size=2, per_device_train_batch_size=4,
        max_dec_len=8, max_prompt_len=64, max_length=128, eval_rollout_n=3, eval_temperature=1.0, seed=11,
        output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), disable_tqdm=True,
        per_device_rollout_batch_size=8)))  # prompts per generate call, as the CLI's --batch_size 8
    expected_samples: list[dict] = []
    expected = evaluate(s.producer, samples=expected_samples)  # what Session.evaluate() computes
    argv = ["--model", tiny_model_dir, "--data", test, "--n", "3", "--k", "3", "--temperature", "1.0",
            "--max_dec_len", "8", "--seed", "11"]
    metrics, samples, _, prompts, _ = run(build_parser().parse_args(argv))
    assert [r["response"] for r in samples] == [r["response"] for r in expected_samples]  # the same generations
    assert len({r["response"] for r in samples}) > 3  # sampled, not greedy copies
    assert {k: v for k, v in metrics.items() if k.startswith("eval/")} == \
        {k: v for k, v in expected.items() if k.startswith("eval/")}
    assert metrics["eval/prompts"] == 4.0 and prompts == {"arithmetic": 4} and "eval/maj@3" in metrics
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["eval/pass@3"] == metrics["eval/pass@3"]


def test_cli_task_uses_the_test_split_and_prints_a_table(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the test split is generated under ./data on first use
    out = subprocess.run(
        [sys.executable, "-m", "ppokit.eval", "--model", tiny_model_dir, "--task", "arithmetic", "--n", "2",
         "--k", "2", "--max_prompts", "3", "--max_dec_len", "4", "--samples", "1"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "data/arithmetic/test.jsonl: 3 prompts x 2 responses, temperature 1" in lines[0]
    assert lines[2].split() == ["task", "prompts", "mean@2", "pass@1", "pass@2", "accuracy"] or \
        lines[2].split() == ["task", "prompts", "mean@2", "pass@1", "pass@2", "maj@2", "accuracy"]
    assert lines[3].split()[:2] == ["all", "3"]
    assert "--- reward" in out.stdout
    sample = out.stdout[out.stdout.index("--- reward"):].splitlines()
    first = json.loads((tmp_path / "data" / "arithmetic" / "test.jsonl").read_text().splitlines()[0])
    assert f"expected {first['tgt'][0]}" in sample[0]  # the question and its expected answer, not the template
    assert sample[1].startswith("Q: What is") and "im_start" not in sample[1] and sample[2].startswith("A: ")
    assert (tmp_path / "data" / "arithmetic" / "test.jsonl").is_file()
    said = out.stderr.splitlines()  # no silent minutes: what it loads, then what it evaluates (the bar needs a tty)
    assert f"ppokit: loading {tiny_model_dir} and 3 prompts of data/arithmetic/test.jsonl ..." in said
    assert "ppokit: evaluating: 3 prompts x 2 answers (temperature 1)" in said


@pytest.mark.parametrize("argv, message", [
    (["--task", "arithmetic", "--n", "2", "--k", "3"], "--k 3 must be between 1 and --n 2"),
    (["--task", "algebra"], "unknown task 'algebra'"),
    (["--data", "missing.jsonl"], "missing.jsonl"),
])
def test_cli_errors_are_sentences(tiny_model_dir, argv, message, capsys):
    assert main(["--model", tiny_model_dir, *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_names_a_missing_model(capsys, tmp_path):
    assert main(["--model", str(tmp_path / "nowhere"), "--task", "arithmetic", "--max_prompts", "1"]) == 2
    assert "nowhere" in capsys.readouterr().err
