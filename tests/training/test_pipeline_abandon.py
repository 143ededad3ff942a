"""A stop signal abandons the producer thread's batch (issue 47, class 2): the wait for it is interrupted, nothing
waits for it afterwards (not `close`, not the interpreter's exit: the worker is a daemon), and a notebook that
steps on first lets it finish, so two generations never run at once. Fake batches: no model needed."""

import os
import signal
import threading
import time

import pytest

from ppokit.training.pipeline import DaemonWorker, RolloutPipeline


def test_the_producer_worker_is_a_daemon_thread():
    worker = DaemonWorker("ppokit-rollout-test")
    assert worker.submit(lambda x: x + 1, 1).result(timeout=10) == 2
    threads = [t for t in threading.enumerate() if t.name == "ppokit-rollout-test"]
    assert threads and all(t.daemon for t in threads)
    worker.shutdown()


def test_ctrl_c_while_waiting_abandons_the_batch_and_close_does_not_wait_for_it():
    release, running = threading.Event(), []

    def produce():
        running.append(threading.current_thread().name)
        if threading.current_thread() is not threading.main_thread():
            release.wait(60)  # a slow reward in the worker
        return f"batch {len(running)}"

    pipeline = RolloutPipeline(1, threaded=True)
    assert pipeline.next_batch(produce) == "batch 1"  # batch 0 inline; batch 1 now generating in the worker
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # Ctrl-C while the step waits
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pipeline.wait()
    pipeline.close()  # the run unwinds: returns although the worker still runs
    assert time.monotonic() - started < 30 and running == ["MainThread", "ppokit-rollout"] and not release.is_set()
    release.set()


def test_stepping_on_after_an_abandon_waits_for_the_abandoned_batch_first():
    release, overlap, active = threading.Event(), [], []

    def produce():
        active.append(1)
        overlap.append(len(active))
        if len(overlap) == 2:
            release.wait(60)
        active.pop()
        return "batch"

    pipeline = RolloutPipeline(1, threaded=True)
    pipeline.next_batch(produce)  # batch 0 inline, batch 1 in the worker (it blocks)
    pipeline.abandon()  # a stop signal unwound the step
    threading.Timer(0.5, release.set).start()
    pipeline.next_batch(produce)  # a notebook steps on: batch 1 finishes first, unused
    pipeline.close()
    assert max(overlap) == 1  # never two generations at once
