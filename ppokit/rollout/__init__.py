"""Rollout engines: the `RolloutEngine` protocol, transformers' generate (hf) and vLLM.

May import: torch, transformers, vllm, and `ppokit.models` (weights hand-over, autocast).
"""

from __future__ import annotations

import logging

import torch

from ppokit.rollout.base import RolloutEngine, RolloutOutput, SamplingParams, check_prompts
from ppokit.rollout.hf_engine import HFRolloutEngine, eos_token_ids
from ppokit.rollout.vllm_args import tp_layout, vllm_engine_kwargs, vllm_sampling_kwargs
from ppokit.rollout.vllm_engine import VLLMRolloutEngine, vllm_available

__all__ = [
    "HFRolloutEngine",
    "RolloutEngine",
    "RolloutOutput",
    "SamplingParams",
    "VLLMRolloutEngine",
    "check_prompts",
    "eos_token_ids",
    "make_rollout_engine",
    "tp_layout",
    "vllm_available",
    "vllm_engine_kwargs",
    "vllm_sampling_kwargs",
]

log = logging.getLogger("ppokit")
_noted: set[str] = set()


def _note_once(message: str) -> None:
    if message not in _noted:
        _noted.add(message)
        log.warning(message)


def make_rollout_engine(
    kind: str | None,
    use_fusemt: bool,
    model,
    tokenizer,
    *,
    model_path: str | None = None,
    batch_size: int | None = None,
    compute_dtype: torch.dtype | None = None,
    args=None,
    rank: int = 0,
    world_size: int = 1,
    return_logprobs: bool = False,
    **vllm_overrides,
) -> RolloutEngine:
    """Choose the rollout engine.

    `kind` "vllm" (or None with `use_fusemt`, PaddleNLP's fast-generation switch) → vLLM when it is
    installed and the actor has a folder (`model_path`), else the hf engine with a one-time note;
    "hf" → the hf engine. The vLLM engine of this `rank` of `world_size` takes its settings from
    `args` (see `vllm_args.vllm_engine_kwargs`; None = the default arguments), `vllm_overrides`
    replacing single `vllm.LLM` arguments; it always returns per-token log-probs. The hf engine
    generates under autocast to `compute_dtype`, `batch_size` prompts per generate call (None =
    all), with a plain copy of the weights when the model is ZeRO-3 partitioned, and returns the
    sampled tokens' log-probs when `return_logprobs`.
    """
    if kind not in (None, "hf", "vllm"):
        raise ValueError(f"Unknown rollout engine {kind!r}; choose 'hf' or 'vllm'.")
    # use_fusemt is on by default (PaddleNLP's default); vLLM needs a GPU, so on a CPU it asks for nothing
    wants_vllm = kind == "vllm" or (kind is None and use_fusemt and torch.cuda.is_available())
    asked = "the vllm rollout engine was asked for" if kind == "vllm" else "use_fusemt asked for the fast path"
    if wants_vllm and not vllm_available():
        _note_once(f"{asked} but vLLM is not installed; using the hf engine")
    elif wants_vllm and model_path is None:
        _note_once(f"{asked} but vLLM needs the actor's model folder (model_path); using the hf engine")
    elif wants_vllm:
        if args is None:
            from ppokit.args import Arguments

            args = Arguments()
        engine = VLLMRolloutEngine.from_args(args, model_path, tokenizer, eos_token_ids(model, tokenizer),
                                             compute_dtype or torch.bfloat16, rank, world_size, **vllm_overrides)
        engine.update_weights(model)
        return engine
    dtype = compute_dtype if compute_dtype not in (None, torch.float32) else None
    partitioned = any(hasattr(p, "ds_id") for p in model.parameters())
    return HFRolloutEngine(model, tokenizer, batch_size=batch_size, dtype=dtype, copy_weights=partitioned,
                           return_logprobs=return_logprobs)
