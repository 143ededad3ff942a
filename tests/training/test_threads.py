"""The thread policy: a fixed count by default (the same bits idle or beside a busy neighbour, resume exact), the
adaptive policy (auto) as an explicit choice, and an explicit choice is never overridden."""

import json
import logging
import subprocess
import sys

import pytest
import torch

from ppokit.args import ConfigError
from ppokit.training import threads as policy_mod
from ppokit.training import waiting as waiting_mod
from ppokit.training.threads import ThreadPolicy
from ppokit.training.waiting import busy_seconds


class Clock:
    """Scripted /proc readings: wall time, every core's busy seconds, this process's CPU seconds."""

    def __init__(self, monkeypatch):
        self.wall, self.busy, self.own = 0.0, 0.0, 0.0
        monkeypatch.setattr(waiting_mod.time, "monotonic", lambda: self.wall)
        monkeypatch.setattr(waiting_mod, "busy_seconds", lambda cpus: self.busy)
        monkeypatch.setattr(waiting_mod, "own_seconds", lambda: self.own)

    def advance(self, seconds: float, ours: float, others: float) -> None:
        """`seconds` of wall time in which we used `ours` cores and other processes `others`."""
        self.wall += seconds
        self.own += ours * seconds
        self.busy += (ours + others) * seconds


@pytest.fixture()
def four_cores(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(policy_mod, "usable_cpus", lambda: {0, 1, 2, 3})
    monkeypatch.setattr(policy_mod, "govern_waiting", lambda threads, cpus: None)  # not this pretend machine's
    torch.set_num_threads(4)
    yield Clock(monkeypatch)
    torch.set_num_threads(before)


def test_threads_follow_the_cores_other_processes_leave(four_cores):
    clock = four_cores
    policy = ThreadPolicy("auto")
    clock.advance(10, ours=4, others=0)
    assert policy.fit() == 4 == torch.get_num_threads()  # alone: every core
    clock.advance(10, ours=2.5, others=1.5)  # a 2-thread job beside us got 1.5 cores
    assert policy.fit() == 2 == torch.get_num_threads()
    clock.advance(10, ours=1, others=3)
    assert policy.fit() == 1
    clock.advance(10, ours=1, others=3.9)
    assert policy.fit() == 1  # never fewer than one
    clock.advance(10, ours=1, others=0.2)  # the other job ended
    assert policy.fit() == 4


def test_the_default_is_a_fixed_count_that_does_not_follow_the_load(four_cores, monkeypatch):
    clock = four_cores
    monkeypatch.delenv("PPOKIT_THREADS", raising=False)
    policy = ThreadPolicy()
    assert policy.fixed == 4 and not policy.adaptive
    for others in (0, 3, 3.9, 1):
        clock.advance(10, ours=1, others=others)
        assert policy.fit() == 4 == torch.get_num_threads()
    assert ThreadPolicy("fixed").fixed == 4


def test_auto_says_its_cost_and_the_first_change_once(four_cores, caplog):
    clock = four_cores
    with caplog.at_level(logging.DEBUG, logger="ppokit"):
        policy = ThreadPolicy("auto")
        for others in (3, 0, 3, 0):
            clock.advance(10, ours=1, others=others)
            policy.fit()
    info = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(info) == 2  # the cost, once; the first change with its reason, once (later ones are metrics)
    assert "not bit" not in info[0] and "differ in the last bits" in info[0]
    assert "torch threads 4 -> 1: other processes kept 3.0 of 4 cores busy" in info[1]


def test_a_short_window_keeps_the_count(four_cores):
    clock = four_cores
    policy = ThreadPolicy("auto")
    clock.advance(0.1, ours=0, others=4)
    assert policy.fit() == 4  # 0.1 s says nothing; the window keeps growing
    clock.advance(2, ours=1, others=3)
    assert policy.fit() == 1


def test_explicit_choices_win(four_cores, monkeypatch):
    clock = four_cores
    fixed = ThreadPolicy("3")
    clock.advance(10, ours=1, others=3)
    assert fixed.fit() == 3 == torch.get_num_threads()
    torch.set_num_threads(4)
    assert ThreadPolicy("off").fit() == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert not ThreadPolicy("auto").adaptive  # the launcher's per-rank count
    monkeypatch.delenv("OMP_NUM_THREADS")
    policy = ThreadPolicy("auto")
    clock.advance(10, ours=1, others=3)
    assert policy.fit() == 1
    torch.set_num_threads(3)  # the user's own call, e.g. in a notebook
    clock.advance(10, ours=3, others=0)
    assert policy.fit() == 3 and not policy.adaptive
    with pytest.raises(ConfigError, match="PPOKIT_THREADS='many'.*expected fixed"):
        ThreadPolicy("many")


def test_decoding_runs_on_half_the_fixed_count_beside_the_update_and_every_other_phase_on_all_of_it(four_cores,
                                                                                                    monkeypatch):
    import threading

    monkeypatch.delenv("PPOKIT_THREADS", raising=False)
    assert [policy_mod.decoding_count(n, asynchronous=True) for n in (1, 2, 3, 4, 16)] == [1, 1, 1, 2, 8]
    assert [policy_mod.decoding_count(n) for n in (1, 2, 3, 4, 16)] == [1, 2, 3, 4, 16]  # synchronous: all of them
    synchronous = ThreadPolicy().decoding
    assert (synchronous.others, synchronous.decoding) == (4, 4)
    with synchronous.around_decoding():
        assert torch.get_num_threads() == 4
    counts = ThreadPolicy(asynchronous=True).decoding
    assert (counts.others, counts.decoding) == (4, 2)
    with counts.around_decoding():
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == 4
    seen = []

    def producer_thread():  # an asynchronous run's producer: torch keeps a count per thread
        torch.set_num_threads(4)  # what `pipeline._in_thread` does first: the trainer's count
        with counts.around_decoding():
            seen.append(torch.get_num_threads())
        seen.append(torch.get_num_threads())

    worker = threading.Thread(target=producer_thread)
    worker.start()
    worker.join()
    assert seen == [2, 4] and torch.get_num_threads() == 4
    torch.set_num_threads(3)  # the user's own count (a notebook): kept for decoding too
    with counts.around_decoding():
        assert torch.get_num_threads() == 3 == counts.now()
    for mine in ("4", "auto", "off"):  # a count the user chose is theirs in every phase
        assert ThreadPolicy(mine).decoding is None


@pytest.mark.parametrize("producer", ["synchronous", "inline", "thread"])
def test_a_run_decodes_on_all_its_threads_or_half_beside_the_update(tiny_model_dir, tmp_path, monkeypatch, producer,
                                                                    caplog):
    """The default policy on 2 threads: a synchronous run generates on both; an asynchronous one on 1, in the inline producer and in the producer thread alike (else the two would part in their bits); every
    other phase on 2. The console says the counts once."""
    from session_helpers import distinct_chars, tiny_overrides

    import ppokit.rollout.agent_loop as agent_loop
    from ppokit.args import load_arguments
    from ppokit.session import Session

    monkeypatch.delenv("PPOKIT_THREADS", raising=False)
    seen = []
    real = agent_loop.rollout
    monkeypatch.setattr(agent_loop, "rollout", lambda *a, **k: seen.append(torch.get_num_threads()) or real(*a, **k))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    pipeline = ({"staleness_threshold": 0} if producer == "synchronous"
                else {"staleness_threshold": 1, "async_producer": producer})
    try:
        prompts = tmp_path / "p.jsonl"
        prompts.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(8)))
        s = Session(load_arguments(None, overrides=tiny_overrides(
            tiny_model_dir, str(prompts), tmp_path, max_steps=3, eval_datasets=str(prompts), do_eval=True,
            eval_steps=2, **pipeline)), reward_functions=[distinct_chars])
        with caplog.at_level(logging.INFO, logger="ppokit"):
            steps = [s.step() for _ in range(3)]
        s.close()
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    decoding = 2 if producer == "synchronous" else 1
    assert len(seen) >= 3 and set(seen) == {decoding}  # 3 rollouts (+1 queued when asynchronous)
    assert [m["cpu/update_threads"] for m in steps] == [2.0] * 3 and after == 2
    if producer == "synchronous":
        assert [m["cpu/rollout_threads"] for m in steps] == [2.0] * 3
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("CPU threads")]
    assert said == (["CPU threads: 2 for every phase, fixed for the run so that it repeats to the bit "
                     "(PPOKIT_THREADS=N sets N)"] if producer == "synchronous" else
                    ["CPU threads: 1 for decoding (beside the update: asynchronous rollouts), 2 for everything else, "
                     "fixed for the run so that it repeats to the bit (PPOKIT_THREADS=N sets N for every phase)"])


def test_busy_seconds_reads_this_machine():
    first = busy_seconds({0})
    sum(i * i for i in range(200_000))
    assert first is None or busy_seconds({0}) >= first


def test_a_cpu_session_records_its_thread_counts(tiny_model_dir, tmp_path, monkeypatch):
    from session_helpers import distinct_chars, tiny_overrides

    from ppokit.args import load_arguments
    from ppokit.session import Session

    monkeypatch.setenv("PPOKIT_THREADS", "1")
    before = torch.get_num_threads()
    try:
        prompts = tmp_path / "p.jsonl"
        prompts.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(8)))
        s = Session(load_arguments(None, overrides=tiny_overrides(tiny_model_dir, str(prompts), tmp_path,
                                                                  max_steps=1)), reward_functions=[distinct_chars])
        metrics = s.step()
        assert metrics["cpu/rollout_threads"] == metrics["cpu/update_threads"] == 1.0 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def _weights(s) -> dict:
    return {k: v.detach().clone() for k, v in s.model.state_dict().items()}


def test_the_default_run_beside_a_busy_neighbour_resumes_to_the_bits_of_the_idle_run(tiny_model_dir, tmp_path,
                                                                                        monkeypatch):
    """2 steps idle vs 1 step beside a CPU-bound process, saved, resumed for step 2: the same bits (default policy)."""
    from session_helpers import tiny_overrides

    from ppokit.args import load_arguments
    from ppokit.session import Session

    monkeypatch.delenv("PPOKIT_THREADS", raising=False)  # the default, not the suite's "off"
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the suite runs on 1 thread; 2 (this machine's cores) lets `auto` show itself below
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(8)))
    reward = tmp_path / "reward.py"
    reward.write_text("def distinct(prompts, responses, **kw):\n    return [float(len(set(r))) for r in responses]\n")

    def session(folder):
        return Session(load_arguments(None, overrides=tiny_overrides(
            tiny_model_dir, str(prompts), tmp_path / folder, max_steps=2, kl_loss_coeff=0.05,
            reward_functions=f"{reward}:distinct")))

    try:
        idle = session("idle")
        idle_metrics = [idle.step(), idle.step()]
        expected = _weights(idle)
        idle.close()
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            busy = session("busy")
            first = busy.step()
            busy.save()
            busy.close()
        finally:
            neighbour.kill()
            neighbour.wait()
        resumed = Session.resume(str(tmp_path / "busy" / "out"))
        second = resumed.step()
        got = _weights(resumed)
        resumed.close()
    finally:
        torch.set_num_threads(before)
    assert expected.keys() == got.keys()
    assert [k for k in expected if not torch.equal(expected[k], got[k])] == []
    volatile = ("timing/", "throughput/", "memory/")
    for mine, theirs in zip([first, second], idle_metrics):
        assert {k: v for k, v in mine.items() if not k.startswith(volatile)} == {
            k: v for k, v in theirs.items() if not k.startswith(volatile)}
    # The tiny model's bits happen not to depend on the thread count, so the counts are what tells the default from
    # auto here (with PPOKIT_THREADS=auto this line fails: 1 thread beside the neighbour, torch's default 2 idle).
    # A synchronous run decodes on the whole count too (2 of 2), idle or busy.
    assert first["cpu/rollout_threads"] == idle_metrics[0]["cpu/rollout_threads"] == 2
    assert first["cpu/update_threads"] == second["cpu/update_threads"] == idle_metrics[0]["cpu/update_threads"] == 2


def test_the_note_says_once_that_others_slowed_a_fixed_count_and_names_the_levers(four_cores, monkeypatch, caplog):
    clock = four_cores
    monkeypatch.delenv("PPOKIT_THREADS", raising=False)
    with caplog.at_level(logging.INFO, logger="ppokit"):
        policy = ThreadPolicy()
        for others in (0, 0.3, 0.4):  # idle, or a neighbour fitting in what 4 threads leave: no word
            clock.advance(10, ours=4, others=others)
            policy.fit()
        assert not [r for r in caplog.records if "slower" in r.getMessage()]
        for others in (1.0, 3.0, 2.0):  # a core taken from the run's threads: said once
            clock.advance(10, ours=3, others=others)
            assert policy.fit() == 4  # the count stays: the note is all that changes
    said = [r.getMessage() for r in caplog.records if "slower" in r.getMessage()]
    assert len(said) == 1
    assert "kept 1.0 of this machine's 4 cores busy" in said[0] and "computed on 4 threads" in said[0]
    assert "PPOKIT_THREADS=auto" in said[0] and "PPOKIT_THREADS=1" in said[0]


def test_one_thread_of_two_cores_beside_one_neighbour_is_not_slowed(caplog):
    with caplog.at_level(logging.INFO, logger="ppokit"):
        assert not policy_mod.slowed_note(1.0, cores=2, threads=1)  # the neighbour has the other core
        assert policy_mod.slowed_note(1.0, cores=2, threads=2)
    assert len(caplog.records) == 1


def _child_env(**wait) -> dict:
    import os

    # a fresh single process: no wait settings, and no process-group variables of this pytest process (whose own
    # group still holds its port: a child taking MASTER_PORT for a launcher's would bind it again, EADDRINUSE)
    dropped = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "RANK",
               "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PPOKIT_SINGLE_PROCESS_PORT")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return {**env, **wait}


WEIGHTS_CHILD = """
import json, sys
import ppokit, torch
from ppokit.args import load_arguments
from ppokit.session import Session
overrides, out = json.loads(sys.argv[1]), sys.argv[2]
s = Session(load_arguments(None, overrides=overrides))
s.step(); s.step()
torch.save({k: v.detach().clone() for k, v in s.model.state_dict().items()}, out)
print("THREADS", torch.get_num_threads())
"""


def test_how_threads_wait_does_not_change_the_bits(tiny_model_dir, tmp_path):
    """Same count (2), three waits in fresh processes (libgomp reads its spin at load; ppokit's governor switches
    between it and the short one): the same weights."""
    from session_helpers import tiny_overrides

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(8)))
    reward = tmp_path / "reward.py"
    reward.write_text("def distinct(prompts, responses, **kw):\n    return [float(len(set(r))) for r in responses]\n")
    weights = {}
    for name, wait in {"ppokit's governed wait": {}, "spin (libgomp's default)": {"GOMP_SPINCOUNT": "300000"},
                       "passive": {"OMP_WAIT_POLICY": "PASSIVE"}}.items():
        overrides = tiny_overrides(tiny_model_dir, str(prompts), tmp_path / name.split()[0], max_steps=2,
                                   kl_loss_coeff=0.05, reward_functions=f"{reward}:distinct")
        out = tmp_path / f"{name.split()[0]}.pt"
        done = subprocess.run([sys.executable, "-c", WEIGHTS_CHILD, json.dumps(overrides), str(out)],
                              env=_child_env(PPOKIT_THREADS="2", **wait), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and "THREADS 2" in done.stdout, done.stderr[-3000:]
        weights[name] = torch.load(out)
    first, *others = weights.values()
    for other in others:
        assert [k for k in first if not torch.equal(first[k], other[k])] == []
