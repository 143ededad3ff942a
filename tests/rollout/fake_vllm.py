"""A stand-in `vllm` module for CPU tests: records what ppokit asks of vLLM, and refuses what vLLM would.

Insert it with `install(monkeypatch)`. Every `LLM` records its constructor arguments, the sampling
parameters and requests it got, and an ordered event log (sleep / wake_up / load_weights /
reset_prefix_cache / generate) tagged with the thread that made it (tests run one thread per
simulated rank). Like the real engine it refuses to generate while asleep and to load weights
while its weights sleep.

Generation is deterministic: request j of a call (one per sample; prompt p) answers [p[0], p[-1], 100 + x, stop]
(stop = the first stop token id; finish "stop"), cut to max_tokens (finish "length"); the log-prob
of the token at position j is -(j + 1) / 10. x is (k + seed) % 100 for a request with its own seed (k: its
completion index), else (noise + j) % 100, `noise` drawn once per call from the device generator: like vLLM's, it is
seeded at start-up with LLM(seed=...) and reseeded by `current_platform.manual_seed_all(seed)`, and each simulated
rank (thread) has its own, as each real rank has its own device. Every call also draws from torch's global generator
(vLLM's CPU sampler does, even when every request has its own seed): an engine in the trainer's process must set
the trainer's stream back.
"""

from __future__ import annotations

import sys
import threading
import types
from dataclasses import dataclass, field

import torch

_lock = threading.Lock()
_device = threading.local()  # this rank's device generator: .generator, .seeds (every seed it was given)


def manual_seed_all(seed: int) -> None:
    """The platform's device reseed (vLLM's `current_platform.manual_seed_all`), for the calling rank's device."""
    _device.generator = torch.Generator().manual_seed(int(seed))
    _device.seeds = [*getattr(_device, "seeds", []), int(seed)]


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    finish_reason: str
    logprobs: list[dict[int, Logprob]] | None


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


@dataclass
class FakeModel:
    owner: LLM
    loaded: dict = field(default_factory=dict)

    def load_weights(self, weights):
        self.owner._check(not self.owner.weights_asleep, "load_weights while the weights sleep")
        names = []
        for name, tensor in weights:
            self.loaded[name] = tensor.detach().clone()
            names.append(name)
        self.owner._log("load_weights", names)


class FakeRunner:
    """The model runner of vLLM with PR #32133 (January 2026): `reload_weights` takes the new weights."""

    def __init__(self, owner):
        self.model = FakeModel(owner)

    def get_model(self):
        return self.model

    def reload_weights(self, weights_iterator=None, weights_path=None, is_checkpoint_format=True):
        self.model.load_weights(weights_iterator)


class OldFakeRunner(FakeRunner):
    """The model runner of vLLM 0.10.2 up to that PR: `reload_weights()` takes no arguments (it reads the model's
    folder again); new weights go through `get_model().load_weights`."""

    def reload_weights(self):
        self.model.owner._log("reload_from_disk")


class FakeWorker:
    def __init__(self, owner, runner=FakeRunner):
        self.model_runner = runner(owner)

    def reload_weights(self, *args, **kwargs):  # vLLM's worker passes everything to its runner
        self.model_runner.reload_weights(*args, **kwargs)


class LLM:
    instances: list[LLM] = []
    old_reload = False  # True: behave as vLLM before PR #32133 (make_module(old_reload=True))

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.rank = threading.current_thread().name
        self.events: list[tuple[str, object]] = []
        self.requests: list[list[list[int]]] = []  # prompts of each generate call
        self.sampling: list[list[dict]] = []  # the SamplingParams kwargs of each call (one per request)
        self.noise_seeds: list[int | None] = []  # per call: the device generator's last seed when unseeded requests drew
        self.weights_asleep = self.kv_asleep = False
        self.worker = FakeWorker(self, OldFakeRunner if LLM.old_reload else FakeRunner)
        self.problems: list[str] = []
        manual_seed_all(kwargs.get("seed") or 0)  # as vLLM's worker does at start-up
        with _lock:
            LLM.instances.append(self)

    def _check(self, ok: bool, what: str) -> None:
        if not ok:
            self.problems.append(what)
            raise RuntimeError(f"fake vLLM refused: {what}")

    def _log(self, event: str, detail=None) -> None:
        self.events.append((event, detail))

    def sleep(self, level: int = 1):
        self._check(not (self.weights_asleep or self.kv_asleep), "sleep while asleep")
        self.weights_asleep = self.kv_asleep = True
        self._log("sleep", level)

    def wake_up(self, tags: list[str] | None = None):
        tags = tags or ["weights", "kv_cache"]
        self.weights_asleep &= "weights" not in tags
        self.kv_asleep &= "kv_cache" not in tags
        self._log("wake_up", tuple(tags))

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        if isinstance(method, str):
            return [getattr(self.worker, method)(*args, **(kwargs or {}))]
        return [method(self.worker, *args, **(kwargs or {}))]

    def reset_prefix_cache(self):
        self._log("reset_prefix_cache")
        return True

    @property
    def loaded(self) -> dict:
        return self.worker.model_runner.model.loaded

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self._check(not (self.weights_asleep or self.kv_asleep), "generate while asleep")
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        self.requests.append([list(p["prompt_token_ids"]) for p in prompts])
        self.sampling.append([p.kwargs for p in params])
        self._log("generate", len(prompts))
        torch.randint(2**31, (len(prompts),))  # vLLM's CPU sampler draws from the process's generator, seeds or not
        unseeded = any(sp.kwargs.get("seed") is None for sp in params)
        noise = int(torch.randint(100, (1,), generator=_device.generator)) if unseeded else 0
        self.noise_seeds.append(_device.seeds[-1] if unseeded else None)
        return [RequestOutput(list(p["prompt_token_ids"]), [_complete(p["prompt_token_ids"], k, sp.kwargs, noise + j)
                                                            for k in range(sp.kwargs["n"])])
                for j, (p, sp) in enumerate(zip(prompts, params))]


def _complete(prompt: list[int], k: int, kw: dict, noise: int) -> CompletionOutput:
    stop = kw["stop_token_ids"][0]
    x = (k + kw["seed"]) % 100 if kw.get("seed") is not None else noise % 100
    tokens = [prompt[0], prompt[-1], 100 + x, stop]  # ids inside a tiny vocabulary
    cut = tokens[: kw["max_tokens"]]
    logprobs = None
    if kw.get("logprobs") is not None:
        logprobs = [{t: Logprob(-(j + 1) / 10)} for j, t in enumerate(cut)]
    return CompletionOutput(k, cut, "stop" if cut[-1] == stop else "length", logprobs)


def make_module(sleep_mode: bool = True, old_reload: bool = False) -> types.ModuleType:
    """A fresh `vllm` module object over this fake (earlier LLM instances forgotten), with a
    `vllm.platforms` submodule whose platform has a sleep mode or not; `register` puts both in sys.modules.
    old_reload: the worker's `reload_weights` takes no arguments, as before vLLM's PR #32133."""
    module = types.ModuleType("vllm")
    module.LLM = LLM
    module.SamplingParams = SamplingParams
    module.__spec__ = types.SimpleNamespace(name="vllm")  # importlib.util.find_spec finds it
    module.platforms = types.ModuleType("vllm.platforms")
    module.platforms.current_platform = types.SimpleNamespace(is_sleep_mode_available=lambda: sleep_mode,
                                                              is_cpu=lambda: not sleep_mode,
                                                              manual_seed_all=manual_seed_all)
    LLM.instances = []
    LLM.old_reload = old_reload
    return module


def register(module: types.ModuleType) -> None:
    sys.modules["vllm"], sys.modules["vllm.platforms"] = module, module.platforms


def install(monkeypatch, sleep_mode: bool = True, old_reload: bool = False) -> types.ModuleType:
    """Put this fake in sys.modules as `vllm` for one test."""
    module = make_module(sleep_mode, old_reload)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.platforms", module.platforms)
    return module
