"""The bundled tool task: prompts with two worked tool calls, scores on the final answer."""

from ppokit.tasks import get
from ppokit.tasks.multiply import call_text, multiply
from ppokit.tools import parse_calls


def test_rows_carry_two_worked_examples_and_the_reference():
    rows = get("multiply").generate(5, seed=3)
    assert rows == get("multiply").generate(5, seed=3)  # deterministic
    for r in rows:
        assert 100 <= r["a"] <= 999 and 100 <= r["b"] <= 999
        assert len(r["src"]) == len(r["tgt"]) == 5 and r["tgt"][-1] == str(r["a"] * r["b"])
        assert r["src"][-1] == f"What is {r['a']} times {r['b']}?"
        assert parse_calls(r["tgt"][0])[0].arguments == {"a": 211, "b": 437}  # the examples' calls parse
        assert r["src"][1] == "<tool_response>\n92207\n</tool_response>"


def test_score_reads_the_final_answer():
    task, record = get("multiply"), {"label": "181704"}
    assert task.score("804 times 226 is 181704.", record) == 1.0
    assert task.score("181,704 is 804 times 226.", record) == 1.0
    assert task.score("It is 181703.", record) == 0.0
    assert multiply(804, 226) == 181704 and "804" in call_text(804, 226)
