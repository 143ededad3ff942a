from collections import Counter
from fractions import Fraction

import pytest

from ppokit.tasks import TaskError, get
from ppokit.tasks.expr import ExprError, parse

CD = get("countdown")


@pytest.mark.parametrize(
    ("text", "value", "numbers"),
    [
        ("1 + 2 * 3", 7, [1, 2, 3]),
        ("(1 + 2) * 3", 9, [1, 2, 3]),
        ("8 / 3", Fraction(8, 3), [8, 3]),
        ("10 - 4 - 3", 3, [10, 4, 3]),
        ("12 / (4 / 2)", 6, [12, 4, 2]),
        ("7 × 6 ÷ 2", 21, [7, 6, 2]),
        (" 42 ", 42, [42]),
    ],
)
def test_parser_values(text, value, numbers):
    assert parse(text) == (value, numbers)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1 +",
        "(1 + 2",
        "1 + 2)",
        "2 ** 3",
        "-1 + 2",
        "1 / 0",
        "1 / (2 - 2)",
        "__import__('os')",
        "1" * 300,
    ],
)
def test_parser_rejects(text):
    with pytest.raises(ExprError):
        parse(text)


def test_generated_puzzles_are_solved_by_their_reference():
    rows = CD.generate(100, seed=0, numbers="3-6", max_number=30, max_target=200)
    for row in rows:
        expression, target = row["tgt"][0].rsplit(" = ", 1)
        assert int(target) == row["target"] and 1 <= row["target"] <= 200
        assert 3 <= len(row["numbers"]) <= 6 and all(1 <= n <= 30 for n in row["numbers"])
        assert Counter(
            int(t) for t in expression.replace("(", " ").replace(")", " ").split() if t.isdigit()
        ) == Counter(row["numbers"])
        assert (
            abs(eval(expression, {"__builtins__": {}}) - row["target"]) < 1e-9
        )  # test-only independent check
        assert str(row["numbers"]) in row["src"][0] and f"make {row['target']}." in row["src"][0]
    assert {len(r["numbers"]) for r in rows} == {3, 4, 5, 6}
    assert rows == CD.generate(100, seed=0, numbers="3-6", max_number=30, max_target=200)


ROW = {
    "src": ["Using the numbers [3, 5, 2], make 16."],
    "tgt": ["(3 + 5) * 2 = 16"],
    "task": "countdown",
    "numbers": [3, 5, 2],
    "target": 16,
}


@pytest.mark.parametrize(
    ("response", "score", "verdict"),
    [
        ("<think>hm</think><answer>(3 + 5) * 2</answer>", 1.0, "correct"),
        ("<answer>2 * (5 + 3) = 16</answer>", 1.0, "correct"),
        ("Let me try.\n(3+5)*2", 1.0, "correct"),
        ("<answer>3 + 5 + 2</answer>", 0.1, "wrong value"),
        ("<answer>(3 + 5) * 2 * 1</answer>", 0.1, "numbers not available or used twice"),
        ("<answer>(5 + 5) * 2 - 3 - 1</answer>", 0.1, "numbers not available or used twice"),
        ("<answer>sixteen</answer>", 0.0, "unparsed: unexpected character 's'"),
        ("<answer>3 / (5 - 5)</answer>", 0.0, "unparsed: division by zero"),
        ("", 0.0, "missing"),
    ],
)
def test_scores(response, score, verdict):
    value, info = CD.score(response, ROW, details=True)
    assert (value, info["verdict"]) == (score, verdict)


def test_numbers_and_target_come_from_fields_label_json_or_reference():
    answer = "<answer>(3 + 5) * 2</answer>"
    from_label = {"prompt": "p", "label": "(3 + 5) * 2 = 16", "source": "c:1", "fields": {}}
    assert CD.score(answer, from_label) == 1.0
    verl = {"prompt": "p", "label": '{"target": 16, "numbers": [2, 3, 5, 7]}', "source": "c:2", "fields": {}}
    assert CD.score(answer, verl) == 1.0
    fields = {
        "prompt": "p",
        "label": None,
        "source": "c:3",
        "fields": {"numbers": [3, 5, 2, 9], "target": 16},
    }
    assert CD.score(answer, fields) == 1.0
    with pytest.raises(TaskError, match="c:4 has neither numbers/target fields nor a reference"):
        CD.score(answer, {"prompt": "p", "label": None, "source": "c:4", "fields": {}})


def test_reference_scores_the_maximum_and_bad_options_fail():
    for row in CD.generate(30, seed=5):
        assert CD.score(CD.solution(row), row) == CD.max_score == 1.0
    with pytest.raises(TaskError, match=r"numbers must lie within 3\.\.6"):
        CD.generate(1, 0, numbers=7)
