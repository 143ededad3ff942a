import re

import pytest

from ppokit.tasks import TaskError, get

AR = get("arithmetic")


def _value(expression: str) -> int:
    """Independent evaluation: × binds tighter than + and -."""
    terms, signs = [], []
    for token in re.split(r" ([+-]) ", expression):
        if token in "+-":
            signs.append(token)
        else:
            product = 1
            for factor in token.split(" × "):
                product *= int(factor)
            terms.append(product)
    total = terms[0]
    for sign, term in zip(signs, terms[1:]):
        total = total + term if sign == "+" else total - term
    return total


def test_default_rows_are_easy_and_short():
    rows = AR.generate(200, seed=0)
    for row in rows:
        m = re.fullmatch(r"What is (\d) ([+-]) (\d)\? Answer with just the number\.", row["src"][0])
        assert m, row["src"][0]
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        assert row["tgt"] == [str(a + b if op == "+" else a - b)]
        assert int(row["tgt"][0]) >= 0
        assert row["task"] == "arithmetic" and row["expression"] == f"{a} {op} {b}"
    assert {r["expression"].split()[1] for r in rows} == {"+", "-"}


def test_difficulty_knobs():
    rows = AR.generate(
        50, seed=1, digits=2, operands=3, ops="+-*", nonnegative=False, template="Compute {expression}."
    )
    for row in rows:
        expression = row["expression"]
        assert row["src"] == [f"Compute {expression}."]
        numbers = [int(n) for n in re.findall(r"\d+", expression)]
        assert len(numbers) == 3 and all(10 <= n <= 99 for n in numbers)
        assert row["tgt"] == [str(_value(expression))]
    assert any("×" in r["expression"] for r in rows)
    assert any(int(r["tgt"][0]) < 0 for r in rows)


def test_bad_options():
    with pytest.raises(TaskError, match=r"unknown difficulty option 'digit' \(did you mean 'digits'\?\)"):
        AR.generate(1, 0, digit=2)
    with pytest.raises(TaskError, match="ops must be made of"):
        AR.generate(1, 0, ops="/")
    with pytest.raises(TaskError, match="template must contain"):
        AR.generate(1, 0, template="no placeholder")


REC = {"prompt": "What is 3 + 5?", "label": "8", "task": "arithmetic", "source": "a.jsonl:1", "fields": {}}


@pytest.mark.parametrize(
    ("response", "score", "predicted"),
    [
        ("8", 1.0, "8"),
        (" 8<|im_end|>", 1.0, "8"),
        ("3 + 5 = 8.", 1.0, "8"),
        ("The answer is 8.0", 1.0, "8.0"),
        ("\\boxed{8} and then I said 9", 1.0, "8"),
        ("I think 8, no wait, 9", 0.0, "9"),
        ("9", 0.0, "9"),
        ("eight", 0.0, None),
        ("", 0.0, None),
    ],
)
def test_scores(response, score, predicted):
    value, info = AR.score(response, REC, details=True)
    assert value == score and info["predicted"] == predicted and info["correct"] == (score == 1.0)


def test_numbers_with_signs_and_commas():
    assert AR.score("= -2", {**REC, "label": "-2"}) == 1.0
    assert AR.score("5-3", {**REC, "label": "3"}) == 1.0  # a '-' after a digit is an operator
    assert AR.score("It is 1,234", {**REC, "label": "1234"}) == 1.0
    assert AR.score("\\boxed{1{,}234}", {**REC, "label": "1234"}) == 0.0


def test_reference_scores_the_maximum_on_raw_rows():
    for row in AR.generate(20, seed=4, digits=3, ops="+-*"):
        assert AR.score(AR.solution(row), row) == AR.max_score == 1.0
