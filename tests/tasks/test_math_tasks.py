import pytest

from ppokit.data.verl_rows import verl_rows
from ppokit.tasks import TaskError, get


@pytest.mark.parametrize("name", ["gsm8k", "math"])
def test_generated_rows_score_their_solution_and_not_a_wrong_one(name):
    task = get(name)
    rows = task.generate(5, seed=3)
    assert rows == task.generate(5, seed=3) and all(r["task"] == name for r in rows)
    for row in rows:
        assert task.score(task.solution(row), row) == 1.0
        assert task.score("I do not know", row) == 0.0


def test_verl_data_sources_are_aliases():
    assert get("openai/gsm8k") is get("gsm8k")
    assert get("lighteval/MATH") is get("DigitalLearningGmbH/MATH-lighteval") is get("math")


def test_verl_rows_layout():
    row = verl_rows("gsm8k", 1, seed=0)[0]
    assert row["data_source"] == "openai/gsm8k" and row["prompt"][0]["role"] == "user"
    assert row["reward_model"]["style"] == "rule" and row["reward_model"]["ground_truth"].lstrip("-").isdigit()
    assert row["extra_info"]["answer"].endswith("#### " + row["reward_model"]["ground_truth"])
    math_row = verl_rows("math", 1)[0]
    assert get("math").score(f"\\boxed{{{math_row['reward_model']['ground_truth']}}}", {"label": math_row["reward_model"]["ground_truth"]}) == 1.0


def test_bad_difficulty_is_refused():
    with pytest.raises(TaskError, match="max_value"):
        get("gsm8k").generate(1, max_value=1)
