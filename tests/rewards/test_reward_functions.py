"""In-process reward functions: combination, field passing, error reporting, rule routing, file loading."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ppokit.rewards import (
    NamedReward,
    RewardError,
    build_reward_functions,
    compute_rewards,
    load_reward_function,
    make_rule_reward,
    parse_reward_functions,
    record_fields,
    skipped_groups,
)


def rec(i, label=None, task=None, **fields):
    return {"prompt": f"p{i}", "label": label, "task": task, "source": f"data.jsonl:{i + 1}", "fields": fields}


RECORDS = [rec(0, "a", lang="en"), rec(1, "b", lang="fr"), rec(2, "c")]
PROMPTS = ["p0", "p1", "p2"]
RESPONSES = ["a", "x", "c"]


def test_weights_combine_and_per_fn_values_are_unweighted():
    ones = NamedReward("ones", lambda p, r, **f: [1.0, 2.0, 3.0], weight=1.0)
    tens = NamedReward("tens", lambda p, r, **f: [10, 20, 30], weight=0.5)
    total, per_fn = compute_rewards([ones, tens], PROMPTS, RESPONSES, RECORDS)
    assert total.dtype == torch.float32 and total.shape == (3,)
    assert total.tolist() == [6.0, 12.0, 18.0]
    assert per_fn["ones"].tolist() == [1.0, 2.0, 3.0]
    assert per_fn["tens"].tolist() == [10.0, 20.0, 30.0]


def test_fields_are_per_item_lists_and_missing_extras_are_none():
    seen = {}

    def capture(prompts, responses, **fields):
        seen.update(fields)
        return [0.0] * len(responses)

    compute_rewards([NamedReward("capture", capture)], PROMPTS, RESPONSES, RECORDS)
    assert seen["label"] == ["a", "b", "c"]
    assert seen["task"] == [None, None, None]
    assert seen["source"] == ["data.jsonl:1", "data.jsonl:2", "data.jsonl:3"]
    assert seen["lang"] == ["en", "fr", None]
    assert seen["records"] == RECORDS


def test_function_without_kwargs_gets_only_the_fields_it_names():
    def exact(prompts, responses, label):
        return [float(r == x) for r, x in zip(responses, label)]

    total, _ = compute_rewards([NamedReward("exact", exact)], PROMPTS, RESPONSES, RECORDS)
    assert total.tolist() == [1.0, 0.0, 1.0]


def test_tensor_and_numpy_outputs_are_accepted():
    fns = [NamedReward("t", lambda p, r, **f: torch.tensor([1.0, 0.0, 0.5])),
           NamedReward("n", lambda p, r, **f: np.array([1, 2, 3], dtype=np.int64))]
    total, _ = compute_rewards(fns, PROMPTS, RESPONSES, RECORDS)
    assert total.tolist() == [2.0, 2.0, 3.5]


def test_raise_names_function_and_the_failing_record():
    def picky(prompts, responses, label, **_):
        for x in label:
            if x == "b":
                raise ValueError("cannot parse label b")
        return [1.0] * len(responses)

    with pytest.raises(RewardError) as err:
        compute_rewards([NamedReward("picky", picky)], PROMPTS, RESPONSES, RECORDS)
    msg = str(err.value)
    assert "'picky'" in msg and "record 1" in msg and "data.jsonl:2" in msg and "cannot parse label b" in msg
    assert err.value.index == 1 and err.value.source == "data.jsonl:2"


@pytest.mark.parametrize(
    "values, expect",
    [
        ([1.0, math.nan, 0.0], "nan"),
        ([1.0, 0.0, math.inf], "inf"),
        ([None, 0.0, 1.0], "None"),
        ([1.0, "high", 1.0], "str"),
        ([1.0, 2.0], "2 values for 3 responses"),
        (None, "NoneType instead of a list"),
        (0.5, "float instead of a list"),
    ],
)
def test_bad_values_raise_naming_function_and_record(values, expect):
    with pytest.raises(RewardError) as err:
        compute_rewards([NamedReward("bad_fn", lambda p, r, **f: values)], PROMPTS, RESPONSES, RECORDS)
    msg = str(err.value)
    assert "'bad_fn'" in msg and expect in msg
    if isinstance(values, list) and len(values) == 3:
        bad = next(i for i, v in enumerate(values) if not isinstance(v, float) or not math.isfinite(v))
        assert f"record {bad}" in msg and f"data.jsonl:{bad + 1}" in msg


def test_none_is_nan_only_for_skip_capable_functions_and_skipped_groups_drops_whole_groups():
    records = [rec(i, str(i)) for i in range(6)]
    fn = NamedReward("server", lambda p, r, **f: [1.0, 2.0, None, 4.0, 5.0, 6.0], allow_none=True)
    total, per_fn = compute_rewards([fn], [""] * 6, [""] * 6, records)
    assert math.isnan(total[2]) and math.isnan(per_fn["server"][2])
    keep, dropped = skipped_groups(total, group_size=2)
    assert keep.tolist() == [True, True, False, False, True, True] and dropped == 1
    keep, dropped = skipped_groups(total, group_size=3)
    assert keep.tolist() == [False, False, False, True, True, True] and dropped == 1
    with pytest.raises(ValueError, match="groups of 4"):
        skipped_groups(total, group_size=4)


def test_compute_rewards_rejects_mismatched_lengths_duplicates_and_no_functions():
    fn = NamedReward("f", lambda p, r, **f: [0.0] * len(r))
    with pytest.raises(RewardError, match="same length"):
        compute_rewards([fn], PROMPTS[:2], RESPONSES, RECORDS)
    with pytest.raises(RewardError, match="share the name"):
        compute_rewards([fn, fn], PROMPTS, RESPONSES, RECORDS)
    with pytest.raises(RewardError, match="no reward function"):
        compute_rewards([], PROMPTS, RESPONSES, RECORDS)
    total, per_fn = compute_rewards([fn], [], [], [])
    assert total.shape == (0,) and per_fn["f"].shape == (0,)


def test_record_fields_skip_reserved_extra_keys():
    record = rec(0, "a", score=3)
    record["fields"]["label"] = "shadow"
    fields = record_fields([record])
    assert fields["label"] == ["a"] and fields["score"] == [3]


# ---------------------------------------------------------------- rule reward


def test_rule_reward_routes_each_record_to_its_task(fake_tasks):
    registry, get = fake_tasks
    records = [rec(0, "yes", task="knights_knaves"), rec(1, "7", task="arithmetic"), rec(2, "9", task="countdown")]
    rule = NamedReward("rule", make_rule_reward(get_task=get))
    total, _ = compute_rewards([rule], ["", "", ""], ["yes", "7", "0"], records)
    assert total.tolist() == [3.0, 1.0, 10.0]  # echo + each task's bonus
    assert [r["source"] for r in registry["knights_knaves"].seen] == ["data.jsonl:1"]
    assert registry["arithmetic"].seen[0]["label"] == "7"


def test_rule_reward_uses_the_default_task_else_detects_it_per_record(fake_tasks):
    registry, get = fake_tasks
    records = [rec(0, "5"), rec(1, "6", task="knights_knaves")]
    with_default = NamedReward("rule", make_rule_reward("arithmetic", get_task=get))
    assert compute_rewards([with_default], ["", ""], ["5", "6"], records)[0].tolist() == [1.0, 3.0]
    # No task and no default: detected from the label as the reward server does (a plain number -> arithmetic).
    without = NamedReward("rule", make_rule_reward(None, get_task=get))
    assert compute_rewards([without], ["", ""], ["5", "6"], records)[0].tolist() == [1.0, 3.0]
    assert registry["arithmetic"].seen[-1]["task"] == "arithmetic"


def test_rule_reward_unknown_task_is_a_clear_error(fake_tasks):
    _, get = fake_tasks
    rule = NamedReward("rule", make_rule_reward(get_task=get))
    with pytest.raises(RewardError, match="names task 'sudoku'.*known"):
        compute_rewards([rule], [""], [""], [rec(0, "1", task="sudoku")])


# ---------------------------------------------------------------- custom file.py:fn

REWARD_FILE = '''
def length_bonus(prompts, responses, **fields):
    return [len(r) / 10 for r in responses]

def exact(prompts, responses, label, **fields):
    return [float(r == x) for r, x in zip(responses, label)]

NOT_A_FUNCTION = 3
'''


def test_load_reward_function_from_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_FILE)
    fn = load_reward_function(f"{path}:length_bonus")
    assert fn.name == "length_bonus"
    total, per_fn = compute_rewards([fn], ["", ""], ["abc", "abcdefghij"], [rec(0), rec(1)])
    assert per_fn["length_bonus"].tolist() == pytest.approx([0.3, 1.0])


def test_load_reward_function_relative_to_base_dir(tmp_path):
    (tmp_path / "r.py").write_text(REWARD_FILE)
    assert load_reward_function("r.py:exact", base_dir=tmp_path).name == "exact"


def test_load_reward_function_errors(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_FILE)
    with pytest.raises(RewardError, match="does not exist"):
        load_reward_function(f"{tmp_path}/missing.py:fn")
    with pytest.raises(RewardError, match="'nope' is not defined.*exact.*length_bonus"):
        load_reward_function(f"{path}:nope")
    with pytest.raises(RewardError, match="not callable"):
        load_reward_function(f"{path}:NOT_A_FUNCTION")
    with pytest.raises(RewardError, match="file.py:function_name"):
        load_reward_function(str(path))
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    with pytest.raises(RewardError, match="importing .*broken.py.* failed: SyntaxError"):
        load_reward_function(f"{broken}:f")


def test_parse_reward_functions_comma_list(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_FILE)
    fns = parse_reward_functions(f"{path}:exact, {path}:length_bonus")
    assert [f.name for f in fns] == ["exact", "length_bonus"]
    assert parse_reward_functions(None) == [] and parse_reward_functions("") == []


# ---------------------------------------------------------------- build_reward_functions


def args(**kw):
    return SimpleNamespace(**kw)


def test_build_rule_and_custom_with_weights(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_FILE)
    fns = build_reward_functions(args(use_rule_reward=True, task="arithmetic",
                                      reward_functions=f"{path}:exact,{path}:exact", reward_weights=[1.0, 0.5, 0.25]))
    assert [(f.name, f.weight) for f in fns] == [("rule", 1.0), ("exact", 0.5), ("exact_2", 0.25)]
    with pytest.raises(RewardError, match="reward_weights has 2 values but there are 3"):
        build_reward_functions(args(use_rule_reward=True, reward_functions=f"{path}:exact,{path}:exact",
                                    reward_weights=[1.0, 2.0]))


def test_build_rule_reward_when_records_carry_a_task_and_no_other_source():
    fns = build_reward_functions(args(), records=[rec(0, "1", task="arithmetic")])
    assert [f.name for f in fns] == ["rule"]
    with pytest.raises(RewardError, match="no reward is configured"):
        build_reward_functions(args(), records=[rec(0, "1")])


def test_build_server_client_and_its_error_modes():
    fns = build_reward_functions(args(use_rm_server=True, reward_server="http://127.0.0.1:1"),
                                 records=[rec(0, "1", task="arithmetic")])
    assert [f.name for f in fns] == ["reward_server"]  # a task in the data does not add a second reward
    assert not fns[0].allow_none
    skip = build_reward_functions(args(use_rm_server=True, reward_server="http://127.0.0.1:1",
                                       reward_on_error="skip_group"))
    assert skip[0].allow_none and skip[0].fn.__name__ == "score_or_none"
    with pytest.raises(RewardError, match="reward_server is not set"):
        build_reward_functions(args(use_rm_server=True))
    with pytest.raises(RewardError, match="reward_on_error"):
        build_reward_functions(args(use_rm_server=True, reward_server="http://127.0.0.1:1", reward_on_error="zero"))


def test_value_that_overflows_float32_is_refused_naming_function_and_record():
    huge = NamedReward("huge", lambda p, r, **f: [0.5, 1e300, 0.0])
    with pytest.raises(RewardError, match=r"'huge' returned 1e\+300 for record 1 \(source 'data.jsonl:2'\).*float32"):
        compute_rewards([huge], PROMPTS, RESPONSES, RECORDS)


def test_weighted_sum_that_overflows_float32_is_refused():
    big = NamedReward("big", lambda p, r, **f: [3e38, 1.0, 1.0], weight=2.0)
    with pytest.raises(RewardError, match=r"weighted sum .* record 0"):
        compute_rewards([big], PROMPTS, RESPONSES, RECORDS)


class Halt(BaseException):
    pass


@pytest.mark.parametrize("exc", [SystemExit(0), Halt("stop")], ids=lambda e: type(e).__name__)
def test_base_exception_from_a_reward_function_is_a_reward_error(exc):
    calls = []

    def leaves(prompts, responses, **fields):
        calls.append(len(responses))
        raise exc

    with pytest.raises(RewardError, match=rf"'leaves' raised {type(exc).__name__}.*batch of 3 records"):
        compute_rewards([NamedReward("leaves", leaves)], PROMPTS, RESPONSES, RECORDS)
    assert calls == [3]  # not called again record by record: the function asked to stop


class StubRewardModel:
    def __init__(self, path, batch_size=8):
        self.path, self.batch_size = path, batch_size

    def __call__(self, prompts, responses, **fields):
        return [0.5] * len(responses)


def test_explicit_reward_model_is_not_dropped_when_records_carry_a_task(monkeypatch, caplog, tmp_path):
    monkeypatch.setattr("ppokit.rewards.model_reward.ModelReward", StubRewardModel)
    records = [rec(0, "1", task="arithmetic")]
    with caplog.at_level("INFO", logger="ppokit"):
        fns = build_reward_functions(args(reward_model_name_or_path="rm", use_rule_reward=False,
                                          per_device_reward_batch_size=3), records=records)
    assert [f.name for f in fns] == ["reward_model"] and fns[0].fn.batch_size == 3 and fns[0].fn.path == "rm"
    assert "reward sources: reward/reward_model (weight 1, reward_model_name_or_path rm)" in caplog.text
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_FILE)
    both = build_reward_functions(args(reward_model_name_or_path="rm", reward_functions=f"{path}:exact",
                                       reward_weights=[1.0, 0.5]), records=records)
    assert [(f.name, f.weight) for f in both] == [("exact", 1.0), ("reward_model", 0.5)]
    total, per_fn = compute_rewards(both, ["p0"], ["1"], records)
    assert set(per_fn) == {"exact", "reward_model"} and total.tolist() == [1.0 * per_fn["exact"].item() + 0.25]


def test_use_rule_reward_replaces_the_reward_model_with_a_note(monkeypatch, caplog):
    monkeypatch.setattr("ppokit.rewards.model_reward.ModelReward", StubRewardModel)
    with caplog.at_level("INFO", logger="ppokit"):
        fns = build_reward_functions(args(reward_model_name_or_path="rm", use_rule_reward=True, rl_algorithm="ppo"),
                                     records=[rec(0, "1", task="arithmetic")])
    assert [f.name for f in fns] == ["rule"]
    assert "reward_model_name_or_path rm is not scored because use_rule_reward is true" in caplog.text
    assert "it still initialises the critic" in caplog.text
