"""verl's gsm8k / MATH rows train with no reward configuration: the default reward follows data_source."""

import pytest

from ppokit.data.records import row_to_record
from ppokit.rewards import compute_rewards
from ppokit.rewards.build import build_reward_functions
from ppokit.tasks.math_answer import (
    gsm8k_answer,
    gsm8k_score,
    last_boxed,
    last_number,
    math_score,
    normalize_math_answer,
)

GSM8K_ROW = {  # the layout verl's gsm8k preprocessing writes
    "data_source": "openai/gsm8k",
    "prompt": [{"role": "user", "content": "Natalia sold clips to 48 of her friends in April, and then she sold half "
                "as many clips in May. How many clips did Natalia sell altogether in April and May? Let's think step "
                "by step and output the final answer after \"####\"."}],
    "ability": "math",
    "reward_model": {"style": "rule", "ground_truth": "72"},
    "extra_info": {"split": "train", "index": 0, "answer": "48/2 = 24\n48+24 = 72\n#### 72", "question": "Natalia..."},
}
MATH_ROW = {  # the layout verl's MATH preprocessing writes
    "data_source": "DigitalLearningGmbH/MATH-lighteval",
    "prompt": [{"role": "user", "content": "What is $\\frac{1}{2} + \\frac{1}{4}$? Let's think step by step and "
                "output the final answer within \\boxed{}."}],
    "ability": "math",
    "reward_model": {"style": "rule", "ground_truth": "\\frac{3}{4}"},
    "extra_info": {"split": "test", "index": 3},
}


class Args:  # nothing about rewards configured
    reward_functions = None
    use_rm_server = False
    use_rule_reward = False
    task = None
    reward_model_name_or_path = None
    reward_weights = None


def _score(row, responses):
    record, kind = row_to_record(row, "verl.parquet#1", prompt_key="prompt")
    assert kind == "chat prompt (verl)"
    records = [record] * len(responses)
    fns = build_reward_functions(Args(), records)
    assert [f.name for f in fns] == ["rule"]
    total, _ = compute_rewards(fns, ["p"] * len(responses), responses, records)
    return total.tolist()


def test_gsm8k_rows_are_scored_by_the_number_after_the_last_marks():
    record, _ = row_to_record(GSM8K_ROW, "g#1", prompt_key="prompt")
    assert (record["task"], record["label"]) == ("gsm8k", "72")
    assert _score(GSM8K_ROW, ["48/2 = 24, 48 + 24 = 72\n#### 72", "#### 70\nno wait\n#### 72.", "#### 7,2",
                              "The answer is 72", "#### 71"]) == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_math_rows_are_scored_by_the_last_box_after_normalisation():
    record, _ = row_to_record(MATH_ROW, "m#1", prompt_key="prompt")
    assert record["task"] == "math"
    assert _score(MATH_ROW, ["so \\boxed{\\dfrac{3}{4}}", "\\boxed{0.75} then \\boxed{3/4}", "\\boxed{\\frac34}",
                             "\\boxed{\\frac{3}{4}} no, \\boxed{\\frac{1}{4}}", "3/4"]) == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_unknown_data_source_is_not_a_silent_zero():
    row = {**GSM8K_ROW, "data_source": "my/private_set"}
    record, _ = row_to_record(row, "x#1", prompt_key="prompt")
    assert record["task"] is None
    with pytest.raises(Exception, match=r"no reward is configured.*data_source 'my/private_set' has no built-in scorer"):
        build_reward_functions(Args(), [record])


@pytest.mark.parametrize("text, answer", [("a\n#### 72", "72"), ("#### 1 then #### -3.5", "-3.5"),
                                          ("#### $1,234.", "1234"), ("no marks 12", None), ("####", None)])
def test_gsm8k_answer(text, answer):
    assert gsm8k_answer(text) == answer


def test_last_number_and_last_boxed():
    assert last_number("between 3 and 1,250.5 units.") == "1250.5"
    assert last_number("none") is None
    assert last_boxed("\\boxed{1} and \\boxed{\\frac{a}{b^{2}}}") == "\\frac{a}{b^{2}}"
    assert last_boxed("\\fbox{7}") == "7" and last_boxed("$\\boxed 5$") == "5"
    assert last_boxed("\\boxed{unclosed") is None and last_boxed("nothing") is None


@pytest.mark.parametrize("a, b", [("\\left(3,\\dfrac12\\right)", "(3,\\frac{1}{2})"), ("0.5", "\\frac{1}{2}"),
                                  ("10\\text{ inches}", "10"), ("x = 3/4", "\\frac{3}{4}"), ("90^\\circ", "90"),
                                  ("\\$5", "5"), ("50\\%", "50"), ("\\sqrt2", "\\sqrt{2}")])
def test_normalize_math_answer(a, b):
    assert normalize_math_answer(a) == normalize_math_answer(b) == b


def test_scores_against_solution_shaped_references():
    assert gsm8k_score("#### 72", "48+24 = 72\n#### 72") == 1.0
    assert gsm8k_score("#### 72.0", "72") == 1.0
    assert math_score("\\boxed{5}", "so the answer is $\\boxed{5}$.") == 1.0
    assert math_score("5", "5") == 0.0  # no box in the response: 0, as in verl


def test_verl_style_custom_reward_functions_run_per_item(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                    "    return {'score': float(ground_truth in solution_str), 'src': data_source}\n")
    from verl_helpers import grpo_line

    from ppokit.args import load_arguments
    from ppokit.main_ppo import parse_main_ppo

    args, _, _ = parse_main_ppo([*grpo_line("m", "d"), f"custom_reward_function.path={path}"])
    assert args.reward_functions == f"{path}:compute_score"
    assert load_arguments(overrides={"reward_functions": args.reward_functions}).reward_functions
    record, _ = row_to_record(GSM8K_ROW, "g#1", prompt_key="prompt")
    fns = build_reward_functions(args, [record, record])
    total, _ = compute_rewards(fns, ["p", "p"], ["it is 72", "it is 70"], [record, record])
    assert total.tolist() == [1.0, 0.0]
