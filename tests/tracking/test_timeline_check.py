"""Notebook 05's fairness sentence: the two sides' per-phase compute beside each other, and a difference above
noise said in words (hand-made metrics, the values a person would read)."""

from ppokit.tracking.timeline import compute_check


def steps(rollout: float, update: float, wait: float = 1.0) -> list[dict]:
    return [{"timing/rollout_s": rollout, "timing/ref_s": 0.0, "timing/old_logprob_s": 0.0,
             "timing/update_s": update, "timing/reward_s": wait}] * 3


def test_compute_that_agrees_is_said_to_agree():
    text = compute_check(steps(2.0, 6.0), steps(2.2, 6.5)).splitlines()
    assert text[1].split() == ["rollout", "compute", "(s)", "2.00", "2.20"]
    assert text[-1].startswith("the two sides' compute agrees within 30%")


def test_an_async_side_three_times_faster_is_not_a_fair_comparison():
    text = compute_check(steps(8.0, 12.0), steps(2.0, 3.0)).splitlines()[-1]
    assert "differs by more than noise (30%): asynchronous/synchronous rollout compute 0.25x, log-probs + update " \
           "0.25x; the two sides did not run under the same conditions" in text
