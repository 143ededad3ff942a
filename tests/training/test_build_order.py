"""Start-up order on a GPU with vLLM (docs/scaling.md): the actor is loaded on the CPU, vLLM starts on the GPU the
trainer has not touched yet, then the actor moves to the GPU and its DeepSpeed engine is built. Elsewhere (a CPU
run, the hf engine, ZeRO-3's partitioned loading) the actor loads where it trains."""

import sys

import pytest
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "rollout"))
import fake_vllm  # noqa: E402
from session_helpers import distinct_chars, tiny_overrides  # noqa: E402

from ppokit.args import load_arguments  # noqa: E402
from ppokit.training import build  # noqa: E402

GPU = torch.device("cuda", 0)


class Stop(Exception):
    pass


def test_vllm_starts_before_the_actor_reaches_the_gpu(tiny_model_path, prompts_file, tmp_path, monkeypatch):
    fake_vllm.install(monkeypatch)
    args = load_arguments(None, overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path,
                                                         rollout_engine="vllm"))
    events = []
    monkeypatch.setattr(build, "choose_device", lambda args, dist: GPU)  # as on a GPU machine
    real_rollout = build.build_rollout_engine

    def rollout(args, actor, dist):
        events.append(("rollout engine", next(actor.model.parameters()).device.type))
        return real_rollout(args, actor, dist)

    def place(actor):
        events.append(("actor to", str(actor.device)))
        raise Stop  # the rest (DeepSpeed on a GPU) needs a real GPU

    monkeypatch.setattr(build, "build_rollout_engine", rollout)
    monkeypatch.setattr(build, "place_actor", place)
    with pytest.raises(Stop):
        build.build_sides(args, reward_functions=[distinct_chars])
    assert events == [("rollout engine", "meta"), ("actor to", "cuda:0")]  # meta: no host RAM held meanwhile
    assert fake_vllm.LLM.instances  # vLLM was built (the fake)


@pytest.mark.parametrize("case", ["cpu run", "hf engine", "zero3"])
def test_the_actor_loads_where_it_trains_otherwise(case, tiny_model_path, prompts_file, tmp_path, monkeypatch):
    fake_vllm.install(monkeypatch)
    extra = {"rollout_engine": "hf" if case == "hf engine" else "vllm"}
    if case == "zero3":
        extra["sharding"] = "stage3"
    args = load_arguments(None, overrides=tiny_overrides(tiny_model_path, prompts_file, tmp_path, **extra))
    device = torch.device("cpu") if case == "cpu run" else GPU
    assert build.staging_device(args, device, None) == device
