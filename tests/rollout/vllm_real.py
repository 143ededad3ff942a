"""Helpers of the real-vLLM tests (marker `vllm`; `make test-vllm` builds .venv-vllm with vLLM's CPU build)."""

from __future__ import annotations

import pytest
import torch

from ppokit.rollout import vllm_available

needs_vllm = [pytest.mark.vllm, pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed here "
                                                   "(make test-vllm builds .venv-vllm with vLLM's CPU build)")]

# vLLM's CPU attention has no kernel for head_dim 16 (the tiny default): hidden 128 / 4 heads = 32.
TINY = dict(arch="llama", seed=0, hidden=128)
# LLM(...) overrides for tests: a small KV cache (on CPU it is RAM: gpu_memory_utilization would take half of it),
# no torch.compile / CUDA graphs (start-up time; the engine sets that itself on CPU)
SMALL = dict(kv_cache_memory_bytes=64 << 20, enforce_eager=True)


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def trainer_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    """The trainer's log-probs (R,) of `response` after `prompt` under softmax(logits / temperature), float32."""
    ids = torch.tensor([prompt + response], device=next(model.parameters()).device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt):, None]).squeeze(1).cpu()


def vllm_sequence_logprobs(engine, prompt: list[int], response: list[int]) -> torch.Tensor:
    """vLLM's log-probs (R,) of the fixed `response` after `prompt` (its prompt log-probs, temperature 1)."""
    from vllm import SamplingParams

    out = engine.llm.generate([{"prompt_token_ids": prompt + response}],
                              SamplingParams(max_tokens=1, prompt_logprobs=0, detokenize=False), use_tqdm=False)
    steps = out[0].prompt_logprobs[len(prompt):]
    return torch.tensor([step[t].logprob for t, step in zip(response, steps)])
