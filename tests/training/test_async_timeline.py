"""The step timeline (ppokit/tracking/timeline.py) stamps produce/consume calls on the thread that ran them, lays the
phases out from the step's own timing metrics, and draws one static SVG."""

import re
import threading
import time
from types import SimpleNamespace

from ppokit.tracking.timeline import Span, Timeline, timeline_svg


def fake_produce():
    time.sleep(0.03)
    return SimpleNamespace(stats={"timing/rollout_s": 0.02, "timing/reward_s": 0.005})


def fake_consume(batch):
    time.sleep(0.03)
    return {"timing/ref_s": 0.004, "timing/old_logprob_s": 0.006, "timing/update_s": 0.01}


def test_phases_are_laid_out_back_to_back_from_the_call_stamps():
    t = Timeline()
    batch = t.produce(fake_produce)()
    t.consume(fake_consume, batch)
    phases = [(s.lane, s.phase, s.batch) for s in t.spans]
    assert phases == [("main thread", "rollout", 0), ("main thread", "reward", 0), ("main thread", "log-probs", 0),
                      ("main thread", "update", 0), ("main thread", "wait + log", 0)]
    rollout, reward, logprobs, update, rest = t.spans
    assert reward.start == rollout.end and abs((rollout.end - rollout.start) - 0.02) < 1e-9
    assert abs((logprobs.end - logprobs.start) - 0.01) < 1e-9 and update.start == logprobs.end
    assert rest.start == update.end and rest.end >= update.end and logprobs.start >= reward.end
    assert t.total() > 0


def test_a_producer_thread_gets_its_own_lane():
    t = Timeline()
    produce = t.produce(fake_produce)
    worker = threading.Thread(target=produce)
    worker.start()
    t.consume(fake_consume, produce())
    worker.join()
    assert {s.lane for s in t.spans} == {"main thread", "producer thread"}
    assert sorted({s.batch for s in t.spans if s.phase == "rollout"}) == [0, 1]


def test_the_svg_is_static_with_a_bar_and_a_tooltip_per_span():
    spans = [Span("main thread", "rollout", 1.0, 2.0, 0), Span("main thread", "update", 2.0, 2.5, 0),
             Span("producer thread", "rollout", 2.0, 3.0, 1)]
    svg = timeline_svg(spans, "k = 1 & <thread>")
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "<script" not in svg and "http" not in svg
    assert "k = 1 &amp; &lt;thread&gt;" in svg
    assert len(re.findall(r"<rect [^>]*stroke=", svg)) == 3  # one bar per span (the legend's squares have none)
    assert "<title>rollout, batch 1: 1-2 s</title>" in svg and ">producer thread</text>" in svg
    assert "no step was stamped" in timeline_svg([], "empty")


def test_the_producers_wait_inside_the_sync_is_not_drawn_as_update():
    class Pipeline:
        def wait(self):
            time.sleep(0.05)

    def consume_that_waits(batch):
        started = time.perf_counter()
        time.sleep(0.02)  # the update's own work
        pipeline.wait()  # then the weight sync waits for the producer thread
        return {"timing/update_s": time.perf_counter() - started}

    pipeline, t = Pipeline(), Timeline()
    t.watch(pipeline)
    metrics = t.consume(consume_that_waits, None)
    update = next(s for s in t.spans if s.phase == "update")
    assert t.waited > 0 and abs((update.end - update.start) - (metrics["timing/update_s"] - t.waited)) < 1e-9
    rest = next(s for s in t.spans if s.phase == "wait + log")  # the wait, then the logging
    assert rest.end - rest.start >= t.waited - 1e-9 and t.step_seconds() == [t.ends[0]]
