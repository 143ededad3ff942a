"""Rollouts with vLLM (PaddleNLP's `use_fusemt` fast path), colocated with DeepSpeed training on 1..K GPUs.

Every rank builds one `vllm.LLM` on its own GPU with `distributed_executor_backend="external_launcher"`
(vLLM joins the torchrun/DeepSpeed processes; `vllm_args` maps the arguments). Ranks form
tensor-parallel groups of consecutive ranks: in `generate`, the members of a group exchange their
prompts, all of them generate the same requests in lock-step (one model split over their GPUs), and
each keeps the responses to its own prompts.

Memory: the engine sleeps (level 1: KV cache freed, weights copied to CPU) after every `generate`,
so the update has the GPU; `generate` wakes the weights, loads the trained weights if they changed
(`update_weights` only marks them), then wakes the KV cache. Weight sync goes module by module
(ZeRO-3 gathers one module at a time, LoRA merged, no CPU copy) through `LLM.collective_rpc` into
the in-process worker's `model.load_weights`, and the prefix cache is reset after it.
"""

from __future__ import annotations

import os

from ppokit.models.weights import hf_state_by_module
from ppokit.rollout.base import RolloutOutput, SamplingParams, check_prompts
from ppokit.rollout.tp_group import SoloGroup, TPGroup, make_tp_group
from ppokit.rollout.vllm_args import rollout_tp_degree, tp_layout, vllm_engine_kwargs, vllm_sampling_kwargs


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _load_weights_on_worker(worker, weights):
    """Runs on the vLLM worker of this process (`collective_rpc`): load HF-named tensors into its model."""
    worker.model_runner.model.load_weights(weights=weights)


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
        if not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def update_weights(self, model) -> None:
        """Generate with `model`'s weights from the next `generate` on (loaded there, after waking up)."""
        self._stale_model = model

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> RolloutOutput:
        check_prompts(prompt_token_ids)
        shares = self.group.all_gather((list(map(list, prompt_token_ids)), sampling))
        if any(s[1] != sampling for s in shares):
            raise RuntimeError("The ranks of one vLLM tensor-parallel group asked for different sampling settings; "
                               "every rank must use the same arguments file and overrides.")
        prompts, first = _requests_of_group([s[0] for s in shares], self.group.index, sampling.seed is not None)
        self._wake()
        try:
            outputs = self._generate(prompts, sampling)
        finally:
            self.sleep()
        mine = outputs[first * sampling.n : (first + len(prompt_token_ids)) * sampling.n]
        return RolloutOutput(
            prompt_index=[i for i in range(len(prompt_token_ids)) for _ in range(sampling.n)],
            response_ids=[list(c.token_ids) for c in mine],
            finish_reasons=[str(c.finish_reason) for c in mine],
            logprobs=[_sampled_logprobs(c) for c in mine],
        )

    def _wake(self) -> None:
        """Weights back on the GPU, the trained ones loaded if they changed, then the KV cache."""
        if self._asleep:
            self.llm.wake_up(tags=["weights"])  # KV cache stays freed while the weights are rewritten
        if self._stale_model is not None:
            for chunk in hf_state_by_module(self._stale_model):
                self.llm.collective_rpc(_load_weights_on_worker, args=(chunk,))
            self._stale_model = None
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        self.llm.reset_prefix_cache()  # cached blocks were computed with other weights (or are gone)

    def _generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list:
        """Completions of `prompts`, n per prompt in prompt order."""
        from vllm import SamplingParams as VSamplingParams

        base = vllm_sampling_kwargs(sampling, self.eos_ids, logprobs=True)
        if sampling.seed is None:
            params = VSamplingParams(**base)
            requests = [{"prompt_token_ids": p} for p in prompts]
        else:
            # One request per sample with its own seed: reproducible, and samples of one prompt differ.
            base["n"] = 1
            requests = [{"prompt_token_ids": p} for p in prompts for _ in range(sampling.n)]
            params = [VSamplingParams(**base, seed=sampling.seed + j) for j in range(len(requests))]
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        completions = [c for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]
        odd = {str(c.finish_reason) for c in completions} - {"stop", "length"}
        if odd or len(completions) != len(prompts) * sampling.n:
            raise RuntimeError(
                f"vLLM returned {len(completions)} responses (finish reasons {sorted(odd) or 'ok'}) for "
                f"{len(prompts)} prompts x n={sampling.n}; the rollout is incomplete."
            )
        return completions


def _requests_of_group(shares: list[list[list[int]]], index: int, seeded: bool) -> tuple[list[list[int]], int]:
    """(prompts the group generates, where this member's prompts start in them).

    The members' prompts (training: each rank owns its share) are concatenated in group order.
    Seeded sampling (evaluation) of the same prompts on every member gives the same answers
    anyway, so then they are generated once.
    """
    if seeded and all(s == shares[0] for s in shares):
        return shares[0], 0
    starts = [sum(len(s) for s in shares[:i]) for i in range(len(shares))]
    return [p for s in shares for p in s], starts[index]


def _sampled_logprobs(completion) -> list[float]:
    """The engine's log-prob of each sampled token (after temperature: logprobs_mode=processed_logprobs)."""
    if completion.logprobs is None:
        raise RuntimeError("vLLM returned no log-probs although logprobs=0 was requested.")
    return [float(step[token].logprob) for token, step in zip(completion.token_ids, completion.logprobs)]


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
