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


def test_a_slower_async_side_is_said_to_share_the_cores_and_decode_on_fewer_threads():
    text = compute_check(steps(2.0, 6.0), steps(3.0, 6.2)).splitlines()[-1]
    assert "asynchronous/synchronous rollout compute 1.5x; the asynchronous side's phases shared the cores with " \
           "each other" in text
    assert "its producer decoded on half the run's threads (an asynchronous run's default" in text


def test_a_timeline_clock_runs_only_during_its_own_steps(monkeypatch):
    """Two sides' steps taken in turn: each timeline counts its own steps, not the other side's in between
    (a fake clock: the seconds are hand-set, not measured)."""
    import ppokit.tracking.timeline as timeline

    now = [100.0]
    monkeypatch.setattr(timeline.time, "perf_counter", lambda: now[0])

    class Batch:
        stats = {"timing/rollout_s": 1.0, "timing/reward_s": 0.5}

    def produce():
        now[0] += 1.5
        return Batch()

    def consume(batch):
        now[0] += 2.0
        return {"timing/update_s": 2.0}

    mine = timeline.Timeline(origin=now[0], paused_at=now[0])
    for _ in range(2):
        now[0] += 30.0  # the other side's step
        with mine.running():
            mine.consume(consume, mine.produce(produce)())
    assert mine.step_seconds() == [3.5, 3.5] and mine.total() == 7.0
    assert [(s.phase, s.start, s.end) for s in mine.spans[:2]] == [("rollout", 0.0, 1.0), ("reward", 1.0, 1.5)]
