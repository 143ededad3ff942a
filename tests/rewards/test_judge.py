"""The LLM judge with a scripted judge: parse rules, counted failures, pairwise order swap, weights, reports."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from ppokit.rewards import RewardError, build_reward_functions, compute_rewards, skipped_groups
from ppokit.rewards.judge import JudgeReward
from ppokit.rewards.judge.build import make_judge
from ppokit.rewards.judge.clients import JudgeReply
from ppokit.rewards.judge.templates import load_template, parse_choice, parse_p_yes, parse_score, parse_yes_no
from ppokit.rewards.reports import take_reports


class Scripted:
    """A judge whose verdict is `script(user_message_text)`; records every conversation it was asked."""

    name = "scripted"

    def __init__(self, script, tokens: int = 10):
        self.script, self.tokens, self.asked = script, tokens, []

    def complete(self, conversations):
        self.asked.extend(conversations)
        out = []
        for messages in conversations:
            verdict = self.script(messages[-1]["content"])
            out.append(verdict if isinstance(verdict, JudgeReply) else JudgeReply(text=verdict, tokens=self.tokens))
        return out


def _answer(text: str, heading: str = "Answer to grade:") -> str:
    return text.split(heading, 1)[1].strip().split("\n")[0]


def judge(script, template="score_10", on_error="raise", **kw) -> JudgeReward:
    return JudgeReward(Scripted(script), load_template(template), on_error=on_error, **kw)


# ---------------------------------------------------------------- parsers


@pytest.mark.parametrize("text, value", [
    ("The answer is right.\nScore: 10", 1.0),
    ("Score: 1", 0.0),
    ("score = 4", 3 / 9),
    ("**Score:** 7", 6 / 9),
    ("First I thought Score: 2, but on reflection Score: 8", 7 / 9),  # the last one counts
    ("I give it 5/10.", 4 / 9),
    ("I give it 5 out of 10.", 4 / 9),
    ("Score: 11", None),  # outside 1..10: not clamped, unparsed
    ("Score: 0", None),
    ("3/5 of the steps are right", None),  # a fraction of something else
    ("A fine answer.", None),
    ("", None),
])
def test_parse_score(text, value):
    got = parse_score(text)
    assert got == value if value is None else math.isclose(got, value)


def test_parse_score_other_range():
    assert parse_score("Score: 3", 0, 5) == 0.6
    assert parse_score("Score: 6", 0, 5) is None


@pytest.mark.parametrize("text, choice", [
    ("A is clearer.\nVerdict: A", "A"), ("Verdict: b", "B"), ("Verdict: [B]", "B"), ("Verdict: tie", "tie"),
    ("Verdict: A\nactually Verdict: B", "B"), ("I prefer A", None), ("Verdict: C", None),
])
def test_parse_choice(text, choice):
    assert parse_choice(text) == choice


@pytest.mark.parametrize("text, value", [
    ("It does.\nVerdict: yes", 1.0), ("Verdict: No", 0.0), ("yes", 1.0), ("No.", 0.0), ("maybe", None),
    ("Verdict: perhaps", None), ("Yes, it is 7.", 1.0), ("The answer is yes", None), ("", None),
])
def test_parse_yes_no(text, value):
    assert parse_yes_no(text) == value


def test_parse_p_yes():
    assert parse_p_yes({"Yes": 0.3, " yes": 0.1, "No": 0.4, "The": 0.2}) == pytest.approx(0.5)
    assert parse_p_yes({"no": 0.9, "Yes": 0.1}) == pytest.approx(0.1)
    assert parse_p_yes({"The": 0.9}) is None and parse_p_yes(None) is None


def test_p_yes_parser_scores_from_first_token_probabilities():
    j = JudgeReward(Scripted(lambda t: JudgeReply(text="No", tokens=2, first_token_probs={"Yes": 0.2, "No": 0.6})),
                    load_template("yes_no", parser="p_yes"))
    assert j(["q"], ["a"], label=["b"]) == [pytest.approx(0.25)]
    bare = JudgeReward(Scripted(lambda t: "No"), load_template("yes_no", parser="p_yes"))
    with pytest.raises(RewardError, match="did not parse as p_yes"):
        bare(["q"], ["a"], label=["b"])


# ---------------------------------------------------------------- templates


def test_user_templates_format_and_jinja(tmp_path):
    fmt = load_template("Q: {question}\nA: {answer}\nRef: {reference}\nScore 1-10 as 'Score: N'.")
    assert not fmt.jinja and fmt.mode == "score" and fmt.parser == "score"
    assert fmt.render(question="q", answer="a", reference="r")[-1]["content"].startswith("Q: q\nA: a\nRef: r")
    path = tmp_path / "judge.j2"
    path.write_text("{{ answer_a }} vs {{ answer_b }}? Verdict: A or B")
    pair = load_template(str(path), parser="choice")
    assert pair.jinja and pair.mode == "pairwise"
    with pytest.raises(ValueError, match="never names the answer"):
        load_template("Rate {question}")
    with pytest.raises(ValueError, match="neither a built-in template"):
        load_template("missing_file.j2")
    with pytest.raises(ValueError, match="names nope, which no judge prompt is given"):  # at load, not at a rollout
        load_template("{answer} {nope}")



def test_fewshot_template_asks_its_worked_examples_as_chat_turns_before_the_case():
    client = Scripted(lambda text: JudgeReply(text="yes", tokens=3, first_token_probs={"yes": 0.6, "no": 0.2}))
    j = JudgeReward(client, load_template("yes_no_fewshot", parser="p_yes"))
    assert j(["What is 5 + 2?"], ["8"], label=["7"]) == [pytest.approx(0.75)]
    (messages,) = client.asked
    assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert [m["content"] for m in messages[2:9:2]] == ["yes", "no", "yes", "no"]  # two equal, two not
    assert messages[1]["content"] == ("Reference answer: 7\nGiven answer: 7\nDoes the given answer equal the "
                                      "reference answer? Reply yes or no.")
    assert messages[-1]["content"] == ("Reference answer: 7\nGiven answer: 8\nDoes the given answer equal the "
                                       "reference answer? Reply yes or no.")
    assert load_template("yes_no_fewshot").parser == "yes_no"  # a text verdict unless p_yes is asked for
    with pytest.raises(RewardError, match="compares each answer with the reference answer.*has none"):
        j(["What is 5 + 2?"], ["8"])


# ---------------------------------------------------------------- scoring and failures


def test_score_mode_reward_and_report():
    j = judge(lambda text: f"Looks {'right' if _answer(text) == '4' else 'wrong'}.\nScore: "
                           f"{10 if _answer(text) == '4' else 1}")
    values = j(["2+2?", "2+2?"], ["4", "5"], label=["4", "4"])
    assert values == [1.0, 0.0]
    report = j.take_report()
    assert report.metrics["reward/judge_unparsed"] == 0 and report.metrics["reward/judge_errors"] == 0
    assert report.metrics["judge/tokens"] == 20 and report.metrics["judge/calls"] == 2
    assert report.metrics["timing/judge_s"] >= 0
    assert report.notes[0]["judge_verdict"] == "Looks right.\nScore: 10"
    assert j.take_report() is None  # taken once


def test_reference_reaches_the_judge_and_question_is_cut_from_a_chat_prompt():
    client = Scripted(lambda text: "Score: 5")
    JudgeReward(client, load_template("score_10"))(
        ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"], ["4"], label=[["first", "4"]])
    user = client.asked[0][-1]["content"]
    assert "Question:\nWhat is 2+2?" in user and "Reference answer:\n4" in user and "<|im_start|>" not in user


def test_unparsed_verdict_raises_a_sentence_quoting_it():
    j = judge(lambda text: "I cannot decide." if _answer(text) == "5" else "Score: 9")
    records = [{"source": "train.jsonl:1"}, {"source": "train.jsonl:2"}]
    with pytest.raises(RewardError, match=r"could not score 1 answer \(1 unparsed verdict and 0 failed judge calls\)"
                       r".*train.jsonl:2.*'I cannot decide.'.*skip_group") as err:
        j(["q", "q"], ["4", "5"], label=["4", "4"], records=records)
    assert err.value.index == 1
    assert j.unparsed_total == 1 and j.take_report().metrics["reward/judge_unparsed"] == 1


def test_skip_group_gives_none_and_counts_never_a_zero():
    replies = {"4": JudgeReply(text="Score: 10", tokens=3), "5": JudgeReply(text="no idea", tokens=3),
               "6": JudgeReply(error="judge endpoint timed out after 1 s")}
    j = judge(lambda text: replies[_answer(text)], on_error="skip_group")
    values = j(["q"] * 3, ["4", "5", "6"], label=["4"] * 3)
    assert values == [1.0, None, None]
    metrics = j.take_report().metrics
    assert metrics["reward/judge_unparsed"] == 1 and metrics["reward/judge_errors"] == 1


def test_endpoint_error_under_raise_names_it():
    j = judge(lambda text: JudgeReply(error="judge endpoint http://127.0.0.1:1 answered HTTP 404: no such model"))
    with pytest.raises(RewardError, match="1 failed judge call.*HTTP 404: no such model"):
        j(["q"], ["a"], label=["a"])


def test_pairwise_swaps_order_so_position_bias_cancels():
    always_a = judge(lambda text: "Verdict: A", template="pairwise")
    assert always_a(["q"] * 2, ["good", "bad"], label=["ref"] * 2) == [0.5, 0.5]
    asked = always_a.client.asked
    assert len(asked) == 4  # two calls per answer, both orders
    first, second = asked[0][-1]["content"], asked[1][-1]["content"]
    assert "Answer A:\ngood\n\nAnswer B:\nref" in first and "Answer A:\nref\n\nAnswer B:\ngood" in second

    rank = {"good": 2, "ref": 1, "bad": 0}

    def fair(text):  # prefers the better answer (good > ref > bad), wherever it stands
        a = rank[text.split("Answer A:\n")[1].split("\n")[0]]
        b = rank[text.split("Answer B:\n")[1].split("\n")[0]]
        return "Verdict: " + ("A" if a > b else "B" if b > a else "tie")

    assert judge(fair, template="pairwise")(["q"] * 2, ["good", "bad"], label=["ref"] * 2) == [1.0, 0.0]
    assert judge(lambda t: "Verdict: tie", template="pairwise")(["q"], ["x"], label=["r"]) == [0.5]
    with pytest.raises(RewardError, match="has none"):
        judge(fair, template="pairwise")(["q"], ["good"], label=[None], records=[{"source": "a.jsonl:3"}])


def test_rubric_share_of_yes_and_per_record_items():
    def script(text):
        item = text.split("Rubric item: ")[1].split("\n")[0]
        return "Verdict: " + ("yes" if item in ("polite", "short") else "no")

    j = judge(script, template="rubric", rubric=["polite", "short", "cites a source"])
    assert j(["q"], ["hi"], label=[None]) == [pytest.approx(2 / 3)]
    assert j(["q", "q"], ["hi", "hi"], label=[None, None], rubric=[["polite"], None]) == [1.0, pytest.approx(2 / 3)]
    with pytest.raises(RewardError, match="no rubric items"):
        judge(script, template="rubric")(["q"], ["hi"], label=[None])


# ---------------------------------------------------------------- as a reward source


def _args(**kw):
    base = dict(reward_functions=None, use_rm_server=False, task=None, reward_model_name_or_path=None,
                use_rule_reward=False, reward_on_error="raise", reward_weights=None, judge_template="score_10")
    return SimpleNamespace(**{**base, **kw})


def test_build_registers_the_judge_with_rule_by_weight(monkeypatch, fake_tasks):
    import ppokit.rewards.judge.build as jb

    client = Scripted(lambda text: "Score: " + ("10" if _answer(text) == "1" else "4"))
    monkeypatch.setattr(jb, "judge_client", lambda *a, **k: client)
    args = _args(judge_model="smollm2-135m-instruct", use_rule_reward=True, task="arithmetic", reward_weights=[1.0, 0.5])
    fns = build_reward_functions(args)
    assert [f.name for f in fns] == ["rule", "judge"] and [f.weight for f in fns] == [1.0, 0.5]
    monkeypatch.setattr("ppokit.rewards.functions._default_get_task", fake_tasks[1])
    fns = build_reward_functions(args)
    records = [{"label": "1", "source": "t:1"}, {"label": "1", "source": "t:2"}]
    total, per_fn = compute_rewards(fns, ["q", "q"], ["1", "2"], records)
    assert per_fn["rule"].tolist() == [1.0, 0.0]
    assert per_fn["judge"].tolist() == pytest.approx([1.0, 3 / 9])
    assert total.tolist() == pytest.approx([1.5, 0.5 * 3 / 9])
    metrics, notes = take_reports(fns, 2)
    assert metrics["judge/calls"] == 2 and notes[1]["judge_verdict"] == "Score: 4"


def test_a_judge_alone_turns_off_the_implicit_rule_reward(monkeypatch):
    import ppokit.rewards.judge.build as jb

    monkeypatch.setattr(jb, "judge_client", lambda *a, **k: Scripted(lambda t: "Score: 5"))
    fns = build_reward_functions(_args(judge_model="x", task="arithmetic"))
    assert [f.name for f in fns] == ["judge"] and not fns[0].allow_none
    assert build_reward_functions(_args(judge_model="x", reward_on_error="skip_group"))[0].allow_none


def test_skip_group_through_compute_rewards_drops_the_group(monkeypatch):
    j = judge(lambda text: "Score: 8" if _answer(text) != "b" else "hmm", on_error="skip_group")
    from ppokit.rewards import NamedReward

    fns = [NamedReward(name="judge", fn=j, allow_none=True, locate_errors=False)]
    total, _ = compute_rewards(fns, ["q"] * 4, ["a", "a", "b", "a"], [{"label": "x"}] * 4)
    keep, dropped = skipped_groups(total, 2)
    assert keep.tolist() == [True, True, False, False] and dropped == 1


def test_make_judge_refuses_bad_settings():
    with pytest.raises(RewardError, match="neither a built-in template"):
        make_judge(Scripted(str), _args(judge_template="nope.j2"))
    with pytest.raises(RewardError, match="judge_parser: choice"):
        JudgeReward(Scripted(str), load_template("pairwise", parser="score"))


def test_judge_keys_load_and_are_restart_keys():
    from ppokit.args import load_arguments

    args = load_arguments(overrides={"judge_model": "http://127.0.0.1:8000/v1", "judge_template": "rubric",
                                     "judge_rubric": ["is polite"], "judge_concurrency": 4})
    assert args.judge_rubric == ["is polite"] and args.judge_temperature == 0.0 and args.judge_backend is None
    from ppokit.args import ConfigError

    with pytest.raises(ConfigError):
        load_arguments(overrides={"judge_parser": "regex"})
