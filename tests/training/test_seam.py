"""The step's seam (docs/seam.md): a producer thread slowed at every phase boundary, either side slower, ends on
the inline schedule's weights to the bit; the producer thread never writes the learner's state; the notebook's
methods walk one ordered phase list (each missing phase once); a batch is trained on once; a step past the plan is
a sentence (issue 46, issue 47 class 3)."""

import random
import threading
import time
from dataclasses import replace

import pytest
import torch
from test_async_pipeline import numbers, tiny_session, weights

from ppokit.errors import PpokitError
from ppokit.training import phases


def slowed(monkeypatch, side: str, seconds: float = 0.03) -> None:
    """Every phase of `side` (scoring included, on the producer's side) sleeps before and after it runs, a jittered
    0–2× `seconds` each time (its own random stream, not torch's), so the two threads meet in changing orders."""
    jitter = random.Random(7)

    def wrap(run):
        def run_slowly(owner, batch):
            time.sleep(seconds * 2 * jitter.random())
            out = run(owner, batch)
            time.sleep(seconds * 2 * jitter.random())
            return out
        return run_slowly

    monkeypatch.setattr(phases, "PHASES", tuple(replace(p, run=wrap(p.run)) if p.side == side else p
                                                for p in phases.PHASES))


def six_steps(session) -> tuple[list[dict], dict]:
    metrics = [numbers(session.step()) for _ in range(6)]
    out = weights(session)
    session.close()
    return metrics, out


@pytest.mark.parametrize("bf16", [False, True])
def test_a_producer_thread_slowed_on_either_side_ends_on_the_inline_schedules_weights(tmp_path, monkeypatch, bf16):
    """Six steps, staleness 1: the inline producer (generating on the live model, as users run it), the thread with
    a slow producer and the thread with a slow learner (each phase of that side sleeps at both of its boundaries):
    the same metrics and weights, bit for bit — in float32 and under bf16, where the thread's own copy of the
    weights once was pure bf16 and parted from the inline run at the first batch."""
    inline = tiny_session(tmp_path / "i", staleness_threshold=1, rollout_is="token", bf16=bf16)
    want, w_inline = six_steps(inline)
    for name in ("producer", "learner"):
        with monkeypatch.context() as patch:
            slowed(patch, name)
            got, w = six_steps(tiny_session(tmp_path / name, staleness_threshold=1, rollout_is="token",
                                            async_producer="thread", bf16=bf16))
        assert [m["async/version_lag/max"] for m in got] == [0.0] + [1.0] * 5, name
        for g, m in zip(got, want):
            assert g == m, (name, {k: (g.get(k), m.get(k)) for k in set(g) | set(m) if g.get(k) != m.get(k)})
        assert all(torch.equal(w_inline[k], w[k]) for k in w_inline), name


class GuardedKL:
    """The learner's KL controller, refusing any call or write from another thread than the training one."""

    def __init__(self, inner, owner: int):
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "owner", owner)

    def _check(self, name):
        if threading.get_ident() != self.owner:
            raise RuntimeError(f"kl_ctl.{name} touched from {threading.current_thread().name}")

    def __getattr__(self, name):
        self._check(name)
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        self._check(name)
        setattr(self.inner, name, value)


def test_the_producer_thread_never_writes_the_learners_state(tmp_path, monkeypatch):
    s = tiny_session(tmp_path / "g", staleness_threshold=1, async_producer="thread", kl_coeff=0.05,
                     kl_ctrl_type="adaptive", target_kl=0.1)
    learner, main = s.learner, threading.get_ident()
    assert learner.owner_thread == main  # the threaded producer turned the guard on
    learner.kl_ctl = GuardedKL(learner.kl_ctl, main)
    threads = {"producer": set(), "learner": set()}

    def recorded(phase):
        def run(owner, batch):
            threads[phase.side].add(threading.current_thread().name)
            return phase.run(owner, batch)
        return replace(phase, run=run)

    monkeypatch.setattr(phases, "PHASES", tuple(recorded(p) for p in phases.PHASES))
    applied = []
    monkeypatch.setattr(type(learner), "apply_live", lambda self: applied.append(threading.current_thread().name))
    s.args.temperature = 0.9  # a live edit between steps: read by the producer, never applied from its thread
    for _ in range(3):
        s.step()  # a write from the worker would raise here (pipeline.wait re-raises the worker's error)
    s.close()
    assert threads["learner"] == {"MainThread"} and set(applied) == {"MainThread"}
    assert any(name.startswith("ppokit-rollout") for name in threads["producer"])  # the worker did produce
    errors = []
    writer = threading.Thread(target=lambda: errors.append(_try(lambda: setattr(learner, "updates_done", 99))))
    writer.start()
    writer.join()
    assert "written from thread" in str(errors[0]) and learner.updates_done == 3  # the guard is live, and held


def _try(fn):
    try:
        fn()
    except RuntimeError as exc:
        return exc
    return None


def counting_session(folder):
    """(a tiny session, a list that gets one entry per call of its reward function)."""
    calls = []
    s = tiny_session(folder)
    count = s.producer.reward_fns[0].fn
    s.producer.reward_fns[0] = replace(s.producer.reward_fns[0], fn=lambda p, r, **k: calls.append(1) or count(p, r, **k))
    return s, calls


def test_the_notebook_methods_walk_the_phases_each_missing_one_once(tmp_path):
    s, calls = counting_session(tmp_path / "n")
    batch = s.rollout()
    assert batch.phases_done == ("rollout",) and batch.scores is None
    scores = s.score(batch)
    assert batch.scores is None and scores.shape == (len(batch),)  # a value: the batch held is left as it was
    assert torch.equal(s.score(batch), scores) and len(calls) == 1  # scored once
    advantages = s.compute_advantages(batch)  # dynamic sampling and log-probs run here, once
    assert advantages.shape == batch.response_mask.shape and len(calls) == 1
    stats = s.update(batch)
    assert "actor/pg_loss" in stats and s.learner.updates_done == 1
    with pytest.raises(PpokitError, match="trained on already"):
        s.update(batch)
    fresh = s.rollout()
    stats = s.update(fresh)  # a later phase runs the missing earlier ones: score, ..., advantages
    assert len(calls) == 2 and s.learner.updates_done == 2
    s.close()


def test_a_batch_is_consumed_once_and_the_plan_ends_at_its_last_step(tmp_path):
    s = tiny_session(tmp_path / "c", max_steps=2, lr_scheduler_type="cosine")
    batch = s.produce()
    s.consume(batch)
    with pytest.raises(PpokitError, match="trained on already"):
        s.consume(batch)
    assert s.global_step == 1 and s.learner.updates_done == 1
    s.step()
    lr = s.learner.policy.engine.lr_scheduler.get_last_lr()
    with pytest.raises(PpokitError, match="step 2 is the last of this run's plan.*max_steps=N"):
        s.step()
    with pytest.raises(PpokitError, match="last of this run's plan"):
        s.consume(s.produce())
    assert s.global_step == 2 and s.learner.policy.engine.lr_scheduler.get_last_lr() == lr  # nothing wrapped
    s.close()


def test_a_batch_made_by_another_session_never_passes_for_one_of_this_sessions_draws(tmp_path):
    """A batch loaded from a file (drawn by another Session: its first draw too) is updated on; this Session's own
    first draw is then neither refused as "trained on already" nor swapped for the loaded batch."""
    other = tiny_session(tmp_path / "a", max_steps=3)
    loaded = other.produce()
    other.close()
    s = tiny_session(tmp_path / "b", max_steps=3)
    s.update(loaded)
    own = s.rollout()
    assert own.origin != loaded.origin
    assert s.walk(own, "rollout")[0] is own  # its own draw, not the loaded batch's newest value
    s.update(own)
    s.step()
    assert s.learner.updates_done == 3
    s.close()


def test_a_batch_from_an_older_checkpoints_queue_is_consumed_from_where_it_was_produced(tmp_path):
    """Batches queued by a format-2 checkpoint carry no phase record and no origin: scored means produced."""
    s, calls = counting_session(tmp_path / "o")
    produced = s.produce()
    legacy = replace(produced, phases_done=(), origin=-1)
    assert phases.done_through(legacy) == phases.NAMES.index("dynamic_sampling")
    metrics = s.consume(legacy)
    assert len(calls) == 1 and s.learner.updates_done == 1 and "actor/pg_loss" in metrics  # not scored again
    s.close()


def test_the_live_models_rollouts_take_the_prompt_shared_decoding_step(tmp_path):
    """The inline producer generates on the DeepSpeed-wrapped live model: its rollouts decode through
    `decode_step.decoding_step` (DeepSpeed's own hooks on the model do not turn it off)."""
    from ppokit.rollout.decode_step import shared_step_supported

    session = tiny_session(tmp_path / "s")
    try:
        assert session.model._forward_pre_hooks and shared_step_supported(session.model)
    finally:
        session.close()
