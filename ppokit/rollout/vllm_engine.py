"""Rollouts with vLLM (PaddleNLP's `use_fusemt` fast path), colocated with DeepSpeed training on 1..K GPUs.

Every rank builds one `vllm.LLM` on its own GPU with `distributed_executor_backend="external_launcher"`
(vLLM joins the torchrun/DeepSpeed processes; `vllm_args` maps the arguments). Ranks form
tensor-parallel groups of consecutive ranks: in `generate`, the members of a group exchange their
prompts, all of them generate the same requests in lock-step (one model split over their GPUs), and
each keeps the responses to its own prompts.

Memory: where vLLM's platform has a sleep mode (CUDA, ROCm, XPU; not CPU), the engine sleeps (level 1:
KV cache freed, weights copied to CPU) after every `generate`, so the update has the GPU; `generate`
empties torch's caching allocator, wakes the weights, loads the trained weights if they changed
(`update_weights` only marks them), then wakes the KV cache. Weight sync goes through vLLM's reload
path for processed weights (`reload_weights(weights_iterator=...)`, vLLM with PR #32133, January 2026: each vLLM
layer is rebuilt from the HF-named tensors and re-processed for its kernels as soon as its last tensor arrives);
older vLLM (from the 0.10.2 floor on, whose `reload_weights()` takes no arguments and rereads the folder) gets
them through the model's `load_weights` (`_load_on_worker` tells which by the runner's signature). Either way they
are fed module by module (ZeRO-3 gathers one module at a time, LoRA merged, each tensor copied once in the
engine's dtype), and the prefix cache is reset after it. The same code runs on vLLM's CPU build.

Randomness: a training call (no `SamplingParams.seed`) gives its requests no seeds of their own (vLLM's sampler
would loop over per-request generators at every step, and FlashInfer's top-k/top-p kernel refuses them); the engine's
generator is reseeded before the call instead, from one draw of the trainer's torch stream mixed with the engine's
seed, so a run repeats, a resume (which restores that stream) continues as the uninterrupted run, and each call
samples afresh. A seeded call (evaluation) keeps one generator per request, so an answer does not depend on what
else is batched with it (a sharded evaluation equals one rank's). Either way the trainer's torch stream is set back
after vLLM sampled: in this process vLLM's sampler draws from it (on CPU even for seeded requests).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from dataclasses import replace

from ppokit.models.generators import global_generators_kept
from ppokit.models.weights import hf_state_by_module
from ppokit.rollout.base import RolloutOutput, SamplingParams, check_prompts
from ppokit.rollout.tp_group import SoloGroup, TPGroup, make_tp_group
from ppokit.rollout.vllm_args import rollout_tp_degree, tp_layout, vllm_engine_kwargs, vllm_sampling_kwargs


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


log = logging.getLogger("ppokit")


def local_world_size(world_size: int) -> int:
    """Processes on this node: torchrun's LOCAL_WORLD_SIZE, DeepSpeed's LOCAL_SIZE, else the whole world."""
    for key in ("LOCAL_WORLD_SIZE", "LOCAL_SIZE"):
        if os.environ.get(key):
            return int(os.environ[key])
    return world_size


class VLLMRolloutEngine:
    """`RolloutEngine` over a colocated `vllm.LLM`, generating from token ids, with per-token log-probs.

    Build it with `from_args` (or give `llm_kwargs` from `vllm_engine_kwargs` and the rank's TP
    group). The trained weights reach vLLM through `update_weights(model)`: call it after every
    optimizer step (and once after construction when the actor differs from its folder).
    """

    def __init__(self, llm_kwargs: dict, tokenizer, eos_token_ids: list[int], group: TPGroup | None = None):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the worker lives in this process
        if llm_kwargs.get("distributed_executor_backend") == "external_launcher":
            _single_process_launcher_env()
        _check_dtype(llm_kwargs.get("dtype"))
        from vllm import LLM

        self.tokenizer = tokenizer
        self.eos_ids = sorted(set(eos_token_ids))
        self.group = group or SoloGroup()
        self.can_sleep = bool(llm_kwargs.get("enable_sleep_mode")) and _sleep_mode_available()
        if llm_kwargs.get("enable_sleep_mode") and not self.can_sleep:
            log.warning("vLLM has no sleep mode on this platform: its weights and KV cache stay allocated during "
                        "the update.")
        llm_kwargs = {**llm_kwargs, "enable_sleep_mode": self.can_sleep}
        if _on_cpu():
            # torch.compile of the model takes minutes at every start on CPU (its cache did not reload in vLLM
            # 0.32: "Compiling model again due to a load failure"); eager generation starts in seconds
            llm_kwargs.setdefault("enforce_eager", True)
        self.dtype = _torch_dtype(llm_kwargs.get("dtype"))
        self.seed = int(llm_kwargs.get("seed") or 0)  # seed + data-parallel rank (vllm_engine_kwargs)
        with trainer_threads_kept():
            self.llm = LLM(**llm_kwargs)
        self._stale_model = None  # the model whose weights vLLM has not loaded yet
        self._asleep = False
        self.sleep()  # free the KV cache for whatever the trainer does before the first rollout

    @classmethod
    def from_args(cls, args, model_path: str, tokenizer, eos_token_ids: list[int], compute_dtype, rank: int = 0,
                  world_size: int = 1, **overrides) -> VLLMRolloutEngine:
        """The engine of rank `rank` of `world_size` for arguments `args`; `overrides` replace LLM kwargs."""
        layout = tp_layout(rank, world_size, rollout_tp_degree(args), local_world_size(world_size))
        kwargs = {**vllm_engine_kwargs(args, model_path, layout, compute_dtype), **overrides}
        return cls(kwargs, tokenizer, eos_token_ids, make_tp_group(layout, world_size))

    def sleep(self) -> None:
        """Free the KV cache and move the weights to CPU (vLLM sleep level 1) until the next `generate`."""
        if self.can_sleep and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def update_weights(self, model) -> None:
        """Generate with `model`'s weights from the next `generate` on (loaded there, after waking up)."""
        self._stale_model = model

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> RolloutOutput:
        check_prompts(prompt_token_ids)
        # A training rollout (no seed) samples from the engine's one generator, reseeded before the call from one
        # draw of the trainer's torch stream (`_call_seed`): the group leader's, since TP members must sample alike.
        base = sampling.seed if sampling.seed is not None else self._call_seed()
        shares = self.group.all_gather((list(map(list, prompt_token_ids)), sampling, base))
        if not all(_alike(s[1], sampling) for s in shares):
            raise RuntimeError("The ranks of one vLLM tensor-parallel group asked for different sampling settings; "
                               "every rank must use the same arguments file and overrides.")
        seeded = sampling.seed is not None
        used, first = _requests_of_group(shares, self.group.index, seeded)
        prompts = [p for share in used for p in share[0]]
        with trainer_threads_kept():
            self._wake()
            try:
                outputs = self._generate(prompts, sampling, _request_seeds(used, sampling.n) if seeded else None,
                                         shares[0][2])
            finally:
                self.sleep()
        mine = outputs[first * sampling.n : (first + len(prompt_token_ids)) * sampling.n]
        return RolloutOutput(
            prompt_index=[i for i in range(len(prompt_token_ids)) for _ in range(sampling.n)],
            response_ids=[list(c.token_ids) for c in mine],
            finish_reasons=[str(c.finish_reason) for c in mine],
            logprobs=[_sampled_logprobs(c) for c in mine],
        )

    def _call_seed(self) -> int:
        """The seed of one training call: a draw from the trainer's torch stream (so a run repeats, a resume that
        restores the stream repeats too, and every call differs) mixed with this engine's seed (seed + data-parallel
        rank: the replicas sample differently although the ranks' trainer streams are alike)."""
        import numpy as np
        import torch

        draw = int(torch.randint(2**62, (1,)).item())
        return int(np.random.SeedSequence([draw, self.seed]).generate_state(1, np.uint64)[0] % 2**63)

    def _wake(self) -> None:
        """Weights back on the GPU, the trained ones loaded if they changed, then the KV cache."""
        if self._asleep:
            _empty_device_cache()  # the update's activations still sit in torch's caching allocator
            self.llm.wake_up(tags=["weights"])  # KV cache stays freed while the weights are rewritten
        if self._stale_model is not None:
            weights = ((name, t.to(dtype=self.dtype, copy=True)) for chunk in hf_state_by_module(self._stale_model)
                       for name, t in chunk)  # copies: vLLM keeps a layer's tensors until its last one arrives
            self.llm.collective_rpc(_load_on_worker, args=(weights,))
            self._stale_model = None
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        self.llm.reset_prefix_cache()  # cached blocks were computed with other weights (or are gone)

    def _generate(self, prompts: list[list[int]], sampling: SamplingParams, seeds: list[int] | None,
                  engine_seed: int) -> list:
        """Completions of `prompts`, n per prompt in prompt order, one request per sample.

        `seeds` (a seeded call: evaluation): request j gets its own generator seeded `seeds[j]`, so its answer
        does not depend on what else is batched with it (a sharded evaluation equals one rank's). Otherwise
        (training) every request samples from the engine's generator, reseeded with `engine_seed` first: vLLM's
        sampler then draws the whole batch's noise at once (per-request generators make it loop over the requests
        at every step, and turn off FlashInfer's top-k/top-p kernel on a GPU). Greedy calls need no generator."""
        from vllm import SamplingParams as VSamplingParams

        base = {**vllm_sampling_kwargs(sampling, self.eos_ids, logprobs=True), "n": 1}
        requests = [{"prompt_token_ids": p} for p in prompts for _ in range(sampling.n)]
        own = seeds is not None and sampling.do_sample
        params = [VSamplingParams(**base, seed=seed) for seed in seeds] if own else VSamplingParams(**base)
        # In this process the worker's generators are the trainer's, and vLLM's CPU sampler draws from them even
        # when every request has its own: the trainer's stream is set back after the call.
        with global_generators_kept():
            if sampling.do_sample and not own:
                self.llm.collective_rpc(_reseed_on_worker, args=(engine_seed,))
            outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        completions = [c for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]
        odd = {str(c.finish_reason) for c in completions} - {"stop", "length"}
        if odd or len(completions) != len(prompts) * sampling.n:
            raise RuntimeError(
                f"vLLM returned {len(completions)} responses (finish reasons {sorted(odd) or 'ok'}) for "
                f"{len(prompts)} prompts x n={sampling.n}; the rollout is incomplete."
            )
        return completions


def _reseed_on_worker(worker, seed: int) -> None:
    """Reseed the generators vLLM's sampler draws unseeded requests' noise from, as vLLM seeds them at start-up
    (`set_random_seed`: torch's, then the platform's devices'); run on the worker by `collective_rpc`."""
    import torch
    from vllm.platforms import current_platform

    torch.manual_seed(seed)
    current_platform.manual_seed_all(seed)


def _alike(a: SamplingParams, b: SamplingParams) -> bool:
    """The same sampling settings, seeds aside (members of a group evaluating different chunks seed them
    differently), both seeded or both not."""
    return replace(a, seed=None) == replace(b, seed=None) and (a.seed is None) == (b.seed is None)


def _request_seeds(shares: list, n: int) -> list[int]:
    """One seed per request of a seeded call: member m's requests (the ones it asked for, in order) get
    `its seed + j`, j counting its prompts' samples, as if it had generated alone."""
    return [(base + j) % 2**31 for prompts, _, base in shares for j in range(len(prompts) * n)]


def _load_on_worker(worker, weights) -> None:
    """Load (HF name, tensor) pairs into the vLLM model of `worker` (run there by `collective_rpc`; the worker lives
    in this process): through the reload path when the runner's `reload_weights` takes the weights (PR #32133),
    else through the model's own `load_weights` (vLLM 0.10.2 up to that PR)."""
    import inspect

    runner = worker.model_runner
    if "weights_iterator" in inspect.signature(runner.reload_weights).parameters:
        worker.reload_weights(weights_iterator=weights)
        return
    _note_old_reload()
    model = runner.get_model() if hasattr(runner, "get_model") else runner.model
    model.load_weights(weights)


@functools.cache
def _note_old_reload() -> None:
    log.info("this vLLM's reload_weights takes no weights (before PR #32133): trained weights are loaded through "
             "the model's load_weights (fine for unquantized models)")


def _requests_of_group(shares: list[tuple], index: int, seeded: bool) -> tuple[list[tuple], int]:
    """(the members' (prompts, sampling, seed) shares the group generates, in group order; where this member's
    prompts start in their concatenation).

    The members' prompts (training: each rank owns its share) are concatenated in group order.
    Seeded sampling (evaluation) of the same prompts with the same seed on every member gives the same
    answers anyway, so then they are generated once.
    """
    if seeded and all(s[0] == shares[0][0] and s[2] == shares[0][2] for s in shares):
        return shares[:1], 0
    return list(shares), sum(len(s[0]) for s in shares[:index])


def _sampled_logprobs(completion) -> list[float]:
    """The engine's log-prob of each sampled token (after temperature: logprobs_mode=processed_logprobs)."""
    if completion.logprobs is None:
        raise RuntimeError("vLLM returned no log-probs although logprobs=0 was requested.")
    return [float(step[token].logprob) for token, step in zip(completion.token_ids, completion.logprobs)]


def _sleep_mode_available() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_sleep_mode_available()


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def _torch_dtype(name: str | None):
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(name, torch.bfloat16)


def _empty_device_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@contextlib.contextmanager
def trainer_threads_kept():
    """The trainer's torch threads, CPU affinity and launcher variables, as they were before the block.

    vLLM's CPU worker replaces `torch.set_num_threads` with a no-op after binding its threads, lowers
    torch's intra-op threads to 1 for serving, and its platform exports LOCAL_WORLD_SIZE (as the TP size)
    and LD_PRELOAD; the trainer sharing this process would otherwise run its update on one thread.
    """
    import torch

    setter, threads = torch.set_num_threads, torch.get_num_threads()
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    env = {k: os.environ.get(k) for k in ("LOCAL_WORLD_SIZE", "LD_PRELOAD")}
    try:
        yield
    finally:
        torch.set_num_threads = setter
        if torch.get_num_threads() != threads:
            setter(threads)
        if affinity is not None and os.sched_getaffinity(0) != affinity:
            os.sched_setaffinity(0, affinity)
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _single_process_launcher_env() -> None:
    """The external launcher reads torchrun's variables; a plain `python` process becomes rank 0 of 1."""
    if "RANK" in os.environ:
        return
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))


def _check_dtype(dtype: str | None) -> None:
    import torch

    if dtype == "bfloat16" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        raise ValueError(
            f"bf16 is set but {torch.cuda.get_device_name()} has no bfloat16 support, which vLLM needs to generate "
            "in bf16; set bf16: false and fp16: true in the arguments file."
        )
