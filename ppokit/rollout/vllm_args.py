"""ppokit's arguments → vLLM's `LLM(...)` and `SamplingParams(...)` keyword arguments (pure, no vLLM import).

Colocated layout (as TRL's colocate mode and verl's hybrid engine): every rank of the torchrun /
DeepSpeed job trains *and* runs one vLLM engine on its own GPU, built with
`distributed_executor_backend="external_launcher"` so vLLM joins the job's processes instead of
spawning its own. Consecutive ranks form tensor-parallel groups of `tp` (vLLM's own layout): the
`tp` engines of a group hold one model split across their GPUs and generate the same requests in
lock-step; the groups are vLLM's data-parallel replicas. All ranks of a group must sample with the
same seed (vLLM's torchrun example), so the seed is `seed + data-parallel rank`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ppokit.rollout.base import SamplingParams

VLLM_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


@dataclass(frozen=True)
class TPLayout:
    """Where one rank sits: its tensor-parallel group (consecutive global ranks) and its data-parallel index."""

    tp: int
    group: tuple[int, ...]  # global ranks of this rank's TP group
    index_in_group: int
    dp_rank: int  # which TP group (vLLM data-parallel replica) this rank belongs to
    dp_size: int


def rollout_tp_degree(args) -> int:
    """The rollout tensor-parallel size: `rollout_tensor_parallel_degree`, else `tensor_parallel_degree`, else 1."""
    if args.rollout_tensor_parallel_degree and args.rollout_tensor_parallel_degree > 0:
        return int(args.rollout_tensor_parallel_degree)
    return max(int(args.tensor_parallel_degree), 1)


def tp_layout(rank: int, world_size: int, tp: int, local_world_size: int | None = None) -> TPLayout:
    """This rank's TP group. Groups are consecutive ranks and must not straddle nodes.

    `local_world_size` (processes per node, torchrun's LOCAL_WORLD_SIZE) must be a multiple of `tp`
    so that a TP group is on one machine (tensor parallelism all-reduces every layer).
    """
    if tp < 1:
        raise ValueError(f"rollout tensor-parallel degree must be >= 1, got {tp}")
    if world_size % tp:
        raise ValueError(
            f"rollout_tensor_parallel_degree (or tensor_parallel_degree) = {tp} does not divide the {world_size} "
            f"GPUs of this run; use a divisor of {world_size} (e.g. 1, or the GPUs per node)."
        )
    local = local_world_size or world_size
    if tp > 1 and local % tp:
        raise ValueError(
            f"rollout tensor-parallel degree {tp} does not divide the {local} GPUs per node: a vLLM tensor-parallel "
            f"group must stay on one machine; use a divisor of {local}."
        )
    first = rank - rank % tp
    return TPLayout(tp=tp, group=tuple(range(first, first + tp)), index_in_group=rank % tp,
                    dp_rank=rank // tp, dp_size=world_size // tp)


def vllm_engine_kwargs(args, model_path: str, layout: TPLayout, compute_dtype: torch.dtype) -> dict:
    """Keyword arguments of `vllm.LLM` for this rank.

    Reads `rollout_tensor_parallel_degree`/`tensor_parallel_degree` (through `layout`),
    `rollout_max_num_seqs`, `max_prompt_len + max_dec_len`, `gpu_memory_utilization`, `seed` and the run's
    compute precision (`compute_dtype`, from bf16/fp16).
    """
    if compute_dtype not in VLLM_DTYPES:
        raise ValueError(f"vLLM cannot generate in {compute_dtype}; use bf16, fp16 or float32.")
    return dict(
        model=model_path,
        tensor_parallel_size=layout.tp,
        distributed_executor_backend="external_launcher",
        gpu_memory_utilization=float(args.gpu_memory_utilization),
        max_num_seqs=max_num_seqs(args),
        max_model_len=int(args.max_prompt_len) + int(args.max_dec_len),
        dtype=VLLM_DTYPES[compute_dtype],
        seed=int(args.seed) + layout.dp_rank,  # one seed per TP group: its ranks must sample alike
        enable_sleep_mode=True,
        enable_prefix_caching=True,  # rollout_n samples of a prompt share its KV blocks
        logprobs_mode="processed_logprobs",  # log-probs after temperature, as the trainer computes them
        disable_custom_all_reduce=True,  # as verl's colocated engines: NCCL all-reduce only
    )


UNSET_MAX_NUM_SEQS = 256  # vLLM's own default


def max_num_seqs(args) -> int:
    """vLLM's `max_num_seqs`: `rollout_max_num_seqs` when the arguments set it, else vLLM's own default 256.
    PaddleNLP's schema default (8) stays the key's default, but decoding 8 sequences at a time leaves most of a GPU
    idle (each step reads all the weights for 8 tokens); with rollout_n samples of each prompt there are many more
    to decode at once."""
    if "rollout_max_num_seqs" in getattr(args, "model_fields_set", {"rollout_max_num_seqs"}):
        return int(args.rollout_max_num_seqs)
    return UNSET_MAX_NUM_SEQS


def vllm_sampling_kwargs(sampling: SamplingParams, stop_token_ids: list[int], logprobs: bool = False) -> dict:
    """ppokit `SamplingParams` → keyword arguments of `vllm.SamplingParams`, one to one.

    Greedy (do_sample False) is temperature 0; top_k 0 (off) is vLLM's -1; `seed` is handled by the
    engine (see `VLLMRolloutEngine._generate`: per request for a seeded call, the engine's generator reseeded
    for a training call), not here. `logprobs` asks for the sampled token's log-prob only (vLLM's logprobs=0).
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
        kwargs["logprobs"] = 0
    return kwargs
