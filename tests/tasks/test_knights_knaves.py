"""knights_knaves: generated puzzles have exactly one solution (checked by an independent brute force
over the puzzle *text*), and scores follow the ppo-kk reward server (3 / -0.5 / -1 / -3)."""

import itertools
import re

import pytest

from ppokit.tasks import TaskError, get

KK = get("knights_knaves")


# ---- an independent reader of the puzzle text -------------------------------------------------------
def _atom(text, names):
    m = re.fullmatch(r"(\w+) is a (knight|knave)", text.strip())
    assert m and m.group(1) in names, f"cannot read {text!r}"
    person, role = m.group(1), m.group(2) == "knight"
    return lambda world: world[person] == role


def _statement(text, names):
    text = text.strip().rstrip(".")
    if text.lower().startswith("it is not the case that "):
        inner = _atom(text[len("it is not the case that ") :], names)
        return lambda w: not inner(w)
    m = re.fullmatch(r"[Ii]f (.+) then (.+)", text)
    if m:
        a, b = _atom(m.group(1), names), _atom(m.group(2), names)
        return lambda w: (not a(w)) or b(w)
    for word, fn in (
        (" if and only if ", lambda x, y: x == y),
        (" and ", lambda x, y: x and y),
        (" or ", lambda x, y: x or y),
    ):
        if word in text:
            left, right = text.split(word)
            a, b = _atom(left, names), _atom(right, names)
            return lambda w, a=a, b=b, fn=fn: fn(a(w), b(w))
    return _atom(text, names)


def brute_force(puzzle: str):
    names = re.split(r",? and |, ", re.search(r"inhabitants: (.+?)\. ", puzzle).group(1))
    claims = re.findall(r'(\w+) (?:says|claims|states|remarks), "(.+?)"', puzzle)
    assert [c[0] for c in claims] == names, "one statement per person, in order"
    checks = [(speaker, _statement(text, names)) for speaker, text in claims]
    worlds = []
    for roles in itertools.product([True, False], repeat=len(names)):
        world = dict(zip(names, roles))
        if all(check(world) == world[speaker] for speaker, check in checks):
            worlds.append(world)
    return names, worlds


@pytest.mark.parametrize("people", [2, 3, 5, 8])
def test_every_puzzle_has_exactly_one_solution_matching_the_reference(people):
    for row in KK.generate(25, seed=people, people=people):
        names, worlds = brute_force(row["src"][0])
        assert len(names) == people and len(worlds) == 1
        expected = "\n".join(
            f"({i + 1}) {name} is a {'knight' if worlds[0][name] else 'knave'}"
            for i, name in enumerate(names)
        )
        assert row["tgt"] == [expected]
        assert row["task"] == "knights_knaves" and row["people"] == people


def test_people_range_cycles_and_rows_are_deterministic():
    rows = KK.generate(10, seed=7, people="3-7")
    assert [r["people"] for r in rows] == [3, 4, 5, 6, 7, 3, 4, 5, 6, 7]
    assert rows == KK.generate(10, seed=7, people="3-7")
    assert rows != KK.generate(10, seed=8, people="3-7")


def test_ops_restrict_the_statements():
    for row in KK.generate(20, seed=1, people=4, ops="and"):
        claims = re.findall(r'"(.+?)"', row["src"][0])
        assert all(" or " not in c and "If " not in c and "not the case" not in c for c in claims)


def test_bad_difficulty_is_an_error_naming_the_option():
    with pytest.raises(TaskError, match=r"people must lie within 2\.\.8"):
        KK.generate(1, 0, people=9)
    with pytest.raises(TaskError, match=r"unknown difficulty option 'peple' \(did you mean 'people'\?\)"):
        KK.generate(1, 0, peple=3)
    with pytest.raises(TaskError, match="ops must be"):
        KK.generate(1, 0, ops="xor")


REF = "(1) Zoey is a knight\n(2) Oliver is a knave\n(3) Ethan is a knight"
RECORD = {"prompt": "puzzle", "label": REF, "task": "knights_knaves", "source": "t.jsonl:1", "fields": {}}


# PaddleNLP's compute_score reads every response as if the assistant turn opened with <think> (prepended
# unless the response holds "<|im_start|>assistant\n<think>"): responses start inside the thinking.
@pytest.mark.parametrize(
    ("response", "expected", "verdict"),
    [
        (f"easy</think><answer>{REF}</answer>", 3.0, "correct"),
        ("x</think>\n<answer>Zoey is a knight, Oliver is a knave, Ethan is a knight.</answer>", 3.0, "correct"),
        ("x</think><answer>(1) Zoey is a knight\n(2) Oliver is a knight\n(3) Ethan is a knight</answer>", -0.5, "wrong"),
        ("x</think><answer>(1) Zoey is a knight\n(2) Oliver is a knave</answer>", -1.0, "unparsed"),
        ("x</think><answer>Zoey is a knight, Oliver is a knave, Ethan is a knight or a knave</answer>", -1.0,
         "unparsed"),
        ("x</think><answer></answer>", -1.0, "unparsed"),
        (REF, -3.0, "format"),
        (f"<answer>{REF}</answer>", -3.0, "format"),
        (f"a</think><think>b</think><answer>{REF}</answer>", -3.0, "format"),
        (f"<answer>{REF}</answer>late</think>", -3.0, "format"),
        ("", -3.0, "format"),
    ],
)
def test_scores_as_the_ppo_kk_reward_server(response, expected, verdict):
    value, info = KK.score(response, RECORD, details=True)
    assert value == expected and info["verdict"] == verdict
    assert KK.score(response, RECORD) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        # the response opens its own <think>: with the prepended one that is two, the format fails (-1 - 2)
        (f"<think>easy</think><answer>{REF}</answer>", -3.0),
        ("<think>x</think><answer>(1) Zoey is a knight\n(2) Oliver is a knight\n(3) Ethan is a knight</answer>",
         -3.0),
        # no <think> at all: the prepended one completes the format (+1 + 2), whatever the prompt
        (f"reasoning</think><answer>{REF}</answer>", 3.0),
        # the chat-templated turn itself is in the response: read from the assistant turn on, nothing prepended
        (f"<|im_start|>user\npuzzle<|im_end|>\n<|im_start|>assistant\n<think>r</think><answer>{REF}</answer>", 3.0),
        (f"<|im_start|>assistant\n<think>r</think><answer>{REF.replace('knave', 'knight')}</answer>", -0.5),
        # "<|im_start|>assistant" without "\n<think>" right after it: <think> is still prepended
        (f"<|im_start|>assistant\nr</think><answer>{REF}</answer>", 3.0),
    ],
)
def test_think_is_always_prepended_as_paddlenlp_compute_score(response, expected):
    assert KK.score(response, RECORD) == expected
    prefilled = {**RECORD, "prompt": "puzzle <|im_start|>assistant\n<think>"}
    assert KK.score(response, prefilled) == expected  # the prompt does not change the reading


def test_raw_rows_and_the_solution_helper():
    row = KK.generate(1, seed=3, people=4)[0]
    assert KK.score(KK.solution(row), row) == KK.max_score == 3.0
    record = {
        "messages": [{"role": "user", "content": row["src"][0]}],
        "label": row["tgt"][0],
        "source": "x",
        "fields": {},
    }
    assert KK.score(KK.solution(record), record) == 3.0


def test_a_record_without_reference_is_an_error_naming_it():
    with pytest.raises(TaskError, match="t.jsonl:9 has no reference answer"):
        KK.score("<think></think><answer></answer>", {**RECORD, "label": None, "source": "t.jsonl:9"})
