"""In-process reward functions under `reward_timeout` (issue 25): a hung function is abandoned, retried, then a
sentence (or its groups dropped under skip_group); Ctrl-C inside a function is the user's interrupt."""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace

import pytest

from ppokit.rewards import NamedReward, RewardError, build_reward_functions, compute_rewards
from ppokit.rewards.functions import with_deadline

RECORDS = [{"prompt": f"p{i}", "label": None, "task": None, "source": f"d.jsonl:{i + 1}", "fields": {}} for i in range(4)]
PROMPTS = [r["prompt"] for r in RECORDS]
RESPONSES = ["a", "bb", "ccc", "dddd"]


def hanging(release: threading.Event, calls: list):
    def fn(prompts, responses, **fields):
        calls.append(len(responses))
        release.wait(30)  # "forever" for the test; released at its end so no thread outlives it for long
        return [1.0] * len(responses)

    return fn


def test_a_hung_function_is_abandoned_retried_then_a_sentence():
    release, calls = threading.Event(), []
    reward = with_deadline(NamedReward("slow", hanging(release, calls)), timeout=0.2, retries=1, skip=False)
    try:
        with pytest.raises(RewardError, match=r"'slow' did not return within reward_timeout=0.2 s on any of 2 tries"):
            compute_rewards([reward], PROMPTS, RESPONSES, RECORDS)
    finally:
        release.set()
    assert calls == [4, 4]  # the batch, once more; never record by record


def test_skip_group_drops_a_timed_out_batch_instead_of_stopping():
    release = threading.Event()
    reward = with_deadline(NamedReward("slow", hanging(release, [])), timeout=0.1, retries=0, skip=True)
    fast = NamedReward("fast", lambda p, r, **f: [0.5] * len(r))
    try:
        total, per_fn = compute_rewards([fast, reward], PROMPTS, RESPONSES, RECORDS)
    finally:
        release.set()
    assert all(math.isnan(v) for v in total.tolist()) and per_fn["fast"].tolist() == [0.5] * 4


def test_a_function_within_its_deadline_gives_its_values_and_its_errors_name_the_record():
    ok = with_deadline(NamedReward("len", lambda p, r, **f: [float(len(x)) for x in r]), 5.0, 0, False)
    assert compute_rewards([ok], PROMPTS, RESPONSES, RECORDS)[0].tolist() == [1.0, 2.0, 3.0, 4.0]

    def picky(prompts, responses, **fields):
        if "ccc" in responses:
            raise ValueError("no c")
        return [1.0] * len(responses)

    bad = with_deadline(NamedReward("picky", picky), 5.0, 0, False)
    with pytest.raises(RewardError, match=r"'picky' raised ValueError: no c on record 2 \(source 'd.jsonl:3'\)"):
        compute_rewards([bad], PROMPTS, RESPONSES, RECORDS)


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_ctrl_c_inside_a_reward_function_is_the_users_interrupt(timeout):
    def interrupted(prompts, responses, **fields):
        raise KeyboardInterrupt

    reward = with_deadline(NamedReward("f", interrupted), timeout, 0, False)
    with pytest.raises(KeyboardInterrupt):
        compute_rewards([reward], PROMPTS, RESPONSES, RECORDS)


def test_reward_timeout_reaches_file_functions_and_the_rule_reward(tmp_path):
    path = tmp_path / "r.py"
    path.write_text("def f(prompts, responses, **fields):\n    return [0.0] * len(responses)\n")
    args = SimpleNamespace(reward_functions=f"{path}:f", use_rule_reward=True, task="arithmetic", reward_timeout=7.0,
                           reward_max_retries=2, reward_on_error="skip_group")
    fns = build_reward_functions(args)
    assert [(f.name, f.timeout, f.retries, f.skip_on_timeout) for f in fns] == [
        ("rule", 7.0, 2, True), ("f", 7.0, 2, True)]


def test_a_function_that_needs_the_main_thread_still_runs_there():
    import signal

    def alarmed(prompts, responses, **fields):
        previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)  # ValueError outside the main thread
        signal.signal(signal.SIGALRM, previous)
        return [2.0] * len(responses)

    reward = with_deadline(NamedReward("alarmed", alarmed), 5.0, 0, False)
    assert compute_rewards([reward], PROMPTS, RESPONSES, RECORDS)[0].tolist() == [2.0] * 4
