"""Rollouts with vLLM (PaddleNLP's `use_fusemt` fast path), colocated with training.

vLLM is imported only when a `VLLMRolloutEngine` is built; `vllm_sampling_kwargs` is a pure mapping
(tested without vLLM). The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so
`update_weights` can hand tensors to the worker directly:
`collective_rpc` with a function where available, else the in-process driver worker's model.
"""

from __future__ import annotations

import os

from ppokit.models.weights import gathered, hf_state
from ppokit.rollout.base import RolloutOutput, SamplingParams, check_prompts


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def vllm_sampling_kwargs(sampling: SamplingParams, stop_token_ids: list[int], logprobs: bool = False) -> dict:
    """ppokit `SamplingParams` → keyword arguments of `vllm.SamplingParams`, one to one.

    Greedy (do_sample False) is temperature 0; top_k 0 (off) is vLLM's -1; `seed` is handled by the
    engine per sample (see `VLLMRolloutEngine.generate`), not here.
    """
    kwargs = dict(
        n=sampling.n,
        max_tokens=sampling.max_new_tokens,
        min_tokens=sampling.min_new_tokens,
        temperature=sampling.temperature if sampling.do_sample else 0.0,
        top_p=sampling.top_p if sampling.do_sample else 1.0,
        top_k=sampling.top_k if (sampling.do_sample and sampling.top_k > 0) else -1,
        repetition_penalty=sampling.repetition_penalty,
        stop_token_ids=list(stop_token_ids),
        skip_special_tokens=False,
        detokenize=False,
    )
    if logprobs:
        kwargs["logprobs"] = 0  # the sampled token's log-prob only
    return kwargs


def _load_weights_on_worker(worker, weights):
    """Runs inside the vLLM worker (`collective_rpc`): load HF-named tensors into its model."""
    worker.model_runner.model.load_weights(weights=weights)


class VLLMRolloutEngine:
    """`RolloutEngine` over `vllm.LLM`, generating from token ids.

    `model_path` is the HF folder the actor was loaded from (vLLM reads config and tokenizer there);
    the trained weights reach vLLM through `update_weights(model)`, which must be called once after
    construction if the actor already differs from the folder (e.g. on resume).
    """

    def __init__(
        self,
        model_path: str,
        tokenizer,
        eos_token_ids: list[int],
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.3,
        dtype: str = "bfloat16",
        max_model_len: int | None = None,
        seed: int = 0,
        return_logprobs: bool = False,
    ):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.tokenizer = tokenizer
        self.eos_ids = sorted(set(eos_token_ids))
        self.return_logprobs = return_logprobs
        self.llm = LLM(
            model=model_path,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            max_model_len=max_model_len,
            seed=seed,
            enable_prefix_caching=True,
        )

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> RolloutOutput:
        from vllm import SamplingParams as VSamplingParams

        check_prompts(prompt_token_ids)
        base = vllm_sampling_kwargs(sampling, self.eos_ids, self.return_logprobs)
        if sampling.seed is None:
            requests = [{"prompt_token_ids": list(p)} for p in prompt_token_ids]
            params = VSamplingParams(**base)
        else:
            # One request per sample with its own seed: reproducible, and samples of one prompt differ.
            base["n"] = 1
            requests, params = [], []
            for i, p in enumerate(prompt_token_ids):
                for k in range(sampling.n):
                    requests.append({"prompt_token_ids": list(p)})
                    params.append(VSamplingParams(**base, seed=sampling.seed + i * sampling.n + k))
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        completions = [c for out in outputs for c in sorted(out.outputs, key=lambda c: c.index)]
        odd = {str(c.finish_reason) for c in completions} - {"stop", "length"}
        if odd or len(completions) != len(prompt_token_ids) * sampling.n:
            raise RuntimeError(
                f"vLLM returned {len(completions)} responses (finish reasons {sorted(odd) or 'ok'}) for "
                f"{len(prompt_token_ids)} prompts x n={sampling.n}; the rollout is incomplete."
            )
        return RolloutOutput(
            prompt_index=[i for i in range(len(prompt_token_ids)) for _ in range(sampling.n)],
            response_ids=[list(c.token_ids) for c in completions],
            finish_reasons=[str(c.finish_reason) for c in completions],
            logprobs=[_sampled_logprobs(c) for c in completions] if self.return_logprobs else None,
        )

    def update_weights(self, model) -> None:
        """Copy the trained weights (HF names; LoRA merged; ZeRO-3 gathered) into vLLM."""
        with gathered(model):
            weights = [(name, tensor.detach()) for name, tensor in hf_state(model)]
            if hasattr(self.llm, "collective_rpc"):
                self.llm.collective_rpc(_load_weights_on_worker, args=(weights,))
            else:
                executor = self.llm.llm_engine.model_executor
                executor.driver_worker.model_runner.model.load_weights(weights=weights)
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights


def _sampled_logprobs(completion) -> list[float]:
    if completion.logprobs is None:
        return []
    return [float(step[token].logprob) for token, step in zip(completion.token_ids, completion.logprobs)]
