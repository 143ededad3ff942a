"""The threaded producer on the trainer's own device: the step's update waits for the worker's generation, then
runs beside the producer's waiting (a slow reward), so the generation has the cores to itself (docs/async.md).
Real threads and a fake engine; the order of events is asserted, never a time."""

import threading
import time

import pytest

from ppokit.training.pipeline import RolloutPipeline, WaitingEngine


class SlowEngine:
    def __init__(self, events):
        self.events = events

    def generate(self, prompt_token_ids, sampling):
        time.sleep(0.2)
        self.events.append(("generated", threading.current_thread().name))
        return "tokens"


def producer(engine, events, fail=False):
    def produce():
        if fail:
            raise RuntimeError("the reward server is down")
        engine.generate([[1]], None)
        time.sleep(0.5)  # a remote reward's waiting
        events.append(("scored", threading.current_thread().name))
        return "batch"
    return produce


@pytest.mark.parametrize("first", [True, False])
def test_the_update_starts_after_the_workers_generation_only_where_generation_comes_first(first):
    events = []
    pipeline = RolloutPipeline(1, threaded=True)
    pipeline.generation_first = first
    engine = WaitingEngine(SlowEngine(events), pipeline)
    produce = producer(engine, events)
    for _ in range(2):
        events.clear()
        assert pipeline.next_batch(produce) == "batch"
        events.append(("update", threading.current_thread().name))
        pipeline.wait()
        worker = [e for e in events if e[1] == "ppokit-rollout"]
        assert worker == [("generated", "ppokit-rollout"), ("scored", "ppokit-rollout")]
        order = [name for name, _ in events if name != "generated" or _ == "ppokit-rollout"]
        if first:  # generation, then the update beside the scoring
            assert order[-3:] == ["generated", "update", "scored"]
        else:  # the update at once, beside the generation
            assert order[-3:] == ["update", "generated", "scored"]
    pipeline.close()


def test_a_producer_that_fails_before_generating_does_not_hold_the_step():
    events = []
    pipeline = RolloutPipeline(1, threaded=True)
    pipeline.generation_first = True
    engine = WaitingEngine(SlowEngine(events), pipeline)
    assert pipeline.next_batch(producer(engine, events)) == "batch"  # the first batch: generated inline
    pipeline.wait()
    done = threading.Event()
    threading.Thread(target=lambda: (pipeline.next_batch(producer(engine, events, fail=True)), done.set()),
                     daemon=True).start()
    assert done.wait(10)  # the failed produce released the step
    with pytest.raises(RuntimeError, match="reward server is down"):
        pipeline.wait()
