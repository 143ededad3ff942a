"""The checkpoint package's state protocol (issue 37 item 5): every part saves and loads its own state, an extra
part can be registered (an asynchronous queue would be one), the folder lists what it holds, a format-1 checkpoint
(flat keys, before the protocol) and a format-2 one (before the producer/learner split) still resume bit for bit, and nothing in the package writes a Session's
private fields."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from checkpoint_helpers import assert_bitwise_equal, tiny_config

from ppokit.args import load_arguments
from ppokit.checkpoint import MANIFEST_FILE, STATE_FILE, Stateful, register
from ppokit.session import Session


def session(model_path, folder, **extra) -> Session:
    return Session(load_arguments(None, overrides=tiny_config(model_path, folder, **extra)))


def weights(s: Session) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in s.model.state_dict().items()}


class Queue:
    """A stand-in for an asynchronous rollout queue: what it holds must survive a resume (tensors too)."""

    def __init__(self):
        self.items: list[torch.Tensor] = []

    def state_dict(self) -> dict:
        return {"items": [t.clone() for t in self.items]}

    def load_state_dict(self, state: dict) -> None:
        self.items = [t.clone() for t in state["items"]]


class Version:
    def __init__(self):
        self.version = 0

    def state_dict(self) -> dict:
        return {"version": self.version}

    def load_state_dict(self, state: dict) -> None:
        self.version = state["version"]


def to_format_2(state: dict) -> dict:
    """trainer_state.json as ppokit wrote it before the producer/learner split (counters, data, controllers)."""
    parts = state["parts"]
    producer, learner = parts.pop("producer"), parts.pop("learner")
    parts["counters"].update(rollouts_drawn=producer["rollouts_drawn"], skipped_groups=producer["skipped_groups"],
                             updates_done=learner["updates_done"])
    parts["data"] = {"loader": producer["loader"], "ptx_loader": learner["ptx_loader"]}
    parts["controllers"] = {"kl_ctl": learner["kl_ctl"], "reward_normalizer": producer["reward_normalizer"]}
    state["format"] = 2
    return state


def to_format_1(state: dict) -> dict:
    """trainer_state.json as ppokit wrote it before the state protocol (flat keys, no "parts")."""
    parts = to_format_2(state).pop("parts")
    state.update(parts["counters"], **parts["data"], **parts["controllers"], run_plan=parts["run_plan"],
                 history=parts["tracker"]["history"], format=1)
    return state


def test_registered_parts_are_saved_listed_and_restored(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=3)
    queue, version = Queue(), Version()
    register(s, "queue", queue)
    register(s, "policy_version", version, per_rank=False)
    s.step()
    queue.items, version.version = [torch.arange(3.0), torch.ones(2, 2)], 7
    path = s.save()
    listed = json.loads((path / MANIFEST_FILE).read_text())
    assert listed["parts"]["queue"] == ["state_queue_0.pt"] and listed["parts"]["rng"] == ["rng_state_0.pt"]
    assert listed["parts"]["policy_version"] == "trainer_state.json: parts.policy_version"
    assert {"counters", "run_plan", "producer", "learner", "tracker"} <= set(listed["parts"])
    assert "actor" in listed["parts"]["models"] and listed["contents"]["actor/"]["bytes"] > 0
    s.close()

    r = session(tiny_model_dir, tmp_path, max_steps=3, resume_from_checkpoint="auto")
    queue2, version2 = Queue(), Version()
    register(r, "queue", queue2)
    register(r, "policy_version", version2, per_rank=False)
    from ppokit.checkpoint import resume_into

    resume_into(r, "auto")
    assert r.global_step == 1 and version2.version == 7
    assert [t.tolist() for t in queue2.items] == [[0.0, 1.0, 2.0], [[1.0, 1.0], [1.0, 1.0]]]


def test_register_refuses_what_is_not_stateful_and_built_in_names(tiny_model_dir, tmp_path):
    s = session(tiny_model_dir, tmp_path, max_steps=1)
    assert isinstance(Queue(), Stateful)
    with pytest.raises(TypeError, match="state_dict"):
        register(s, "queue", object())
    with pytest.raises(ValueError, match="built-in"):
        register(s, "rng", Queue())


@pytest.mark.parametrize("older", [to_format_1, to_format_2])
def test_a_format_1_or_2_checkpoint_resumes_bit_for_bit(tiny_model_dir, tmp_path, older):
    s = session(tiny_model_dir, tmp_path, max_steps=3)
    s.step()
    s.step()
    path = s.save()
    third = s.step()
    expected = weights(s)
    s.close()
    state_file = path / STATE_FILE
    state_file.write_text(json.dumps(older(json.loads(state_file.read_text()))))
    (path / MANIFEST_FILE).unlink()
    r = Session.resume(str(tmp_path / "out"))
    assert r.global_step == 2 and [h["step"] for h in r.history] == [1, 2]
    again = r.step()
    assert_bitwise_equal(expected, weights(r))
    assert third["reward/mean"] == again["reward/mean"] and third["actor/pg_loss"] == again["actor/pg_loss"]


def test_nothing_in_the_checkpoint_package_writes_a_sessions_private_fields():
    package = Path(__import__("ppokit.checkpoint").checkpoint.__file__).parent
    for file in package.glob("*.py"):
        text = file.read_text()
        assert not re.search(r"session\._\w+\s*=(?!=)", text), f"{file.name} assigns a private field of the Session"
        assert "session._tracker" not in text and "session._preemption" not in text, file.name
