"""The pure mapping from ppokit's arguments to vLLM's LLM(...) and SamplingParams(...) arguments."""

import pytest
import torch

from ppokit.args import load_arguments
from ppokit.models import dtype_for
from ppokit.rollout import SamplingParams, tp_layout, vllm_engine_kwargs, vllm_sampling_kwargs
from ppokit.rollout.vllm_args import rollout_tp_degree


def arguments(**extra):
    keys = dict(seed=42, rollout_max_num_seqs=32, max_prompt_len=1024, max_dec_len=2048, max_length=3072)
    keys.update(extra)
    return load_arguments(None, overrides=keys)


# (GPUs, TP) -> per rank: (TP group, data-parallel rank = which group, seed = 42 + that rank)
LAYOUTS = {
    (1, 1): [((0,), 0)],
    (2, 1): [((0,), 0), ((1,), 1)],
    (2, 2): [((0, 1), 0)] * 2,
    (8, 1): [((r,), r) for r in range(8)],
    (8, 2): [((0, 1), 0)] * 2 + [((2, 3), 1)] * 2 + [((4, 5), 2)] * 2 + [((6, 7), 3)] * 2,
    (8, 4): [((0, 1, 2, 3), 0)] * 4 + [((4, 5, 6, 7), 1)] * 4,
}


@pytest.mark.parametrize("gpus, tp", sorted(LAYOUTS))
def test_engine_arguments_for_each_rank(gpus, tp):
    args = arguments(rollout_tensor_parallel_degree=tp, gpu_memory_utilization=0.45)
    for rank, (group, dp_rank) in enumerate(LAYOUTS[gpus, tp]):
        layout = tp_layout(rank, gpus, rollout_tp_degree(args), local_world_size=gpus)
        assert (layout.group, layout.dp_rank, layout.dp_size, layout.index_in_group) == (
            group, dp_rank, gpus // tp, group.index(rank))
        kwargs = vllm_engine_kwargs(args, "/m", layout, torch.bfloat16)
        assert kwargs == dict(
            model="/m", tensor_parallel_size=tp, distributed_executor_backend="external_launcher",
            gpu_memory_utilization=0.45, max_num_seqs=32, max_model_len=1024 + 2048, dtype="bfloat16",
            seed=42 + dp_rank, enable_sleep_mode=True, enable_prefix_caching=True,
            logprobs_mode="processed_logprobs", disable_custom_all_reduce=True,
        )


@pytest.mark.parametrize("gpus, tp", [(1, 2), (1, 4), (2, 4), (8, 3)])
def test_a_tp_degree_that_does_not_divide_the_gpus_is_refused(gpus, tp):
    with pytest.raises(ValueError, match=f"= {tp} does not divide the {gpus} GPUs"):
        tp_layout(0, gpus, tp, local_world_size=gpus)


def test_several_nodes_keep_each_tp_group_on_one_node():
    # 2 nodes x 8 GPUs, TP 4: groups 0-3, 4-7 (node 0), 8-11, 12-15 (node 1)
    layout = tp_layout(13, 16, 4, local_world_size=8)
    assert layout.group == (12, 13, 14, 15) and layout.dp_rank == 3 and layout.dp_size == 4
    # 4 nodes x 2 GPUs cannot hold a TP-4 group on one node
    with pytest.raises(ValueError, match="must stay on one machine"):
        tp_layout(0, 8, 4, local_world_size=2)


def test_tp_degree_comes_from_rollout_key_then_paddles_key():
    assert rollout_tp_degree(arguments()) == 1
    assert rollout_tp_degree(arguments(tensor_parallel_degree=4)) == 4  # PaddleNLP files set this one
    assert rollout_tp_degree(arguments(tensor_parallel_degree=4, rollout_tensor_parallel_degree=2)) == 2


@pytest.mark.parametrize("bf16, fp16, expected", [(True, False, "bfloat16"), (False, True, "float16"),
                                                  (False, False, "float32")])
def test_dtype_follows_the_runs_precision(bf16, fp16, expected):
    _, compute = dtype_for(bf16, fp16, "cuda")
    layout = tp_layout(0, 1, 1)
    assert vllm_engine_kwargs(arguments(bf16=bf16, fp16=fp16), "/m", layout, compute)["dtype"] == expected


def test_default_memory_share_and_batch_keys():
    kwargs = vllm_engine_kwargs(load_arguments(None, overrides={}), "/m", tp_layout(0, 1, 1), torch.bfloat16)
    assert kwargs["gpu_memory_utilization"] == 0.5 and kwargs["max_num_seqs"] == 256  # unset: vLLM's own default


def test_sampling_arguments_with_logprobs():
    s = SamplingParams(n=8, max_new_tokens=2048, min_new_tokens=32, temperature=1.0, top_p=1.0)
    assert vllm_sampling_kwargs(s, [151645, 151643], logprobs=True) == dict(
        n=8, max_tokens=2048, min_tokens=32, temperature=1.0, top_p=1.0, top_k=-1, repetition_penalty=1.0,
        stop_token_ids=[151645, 151643], skip_special_tokens=False, detokenize=False, logprobs=0)


def test_verls_rollout_keys_reach_the_engine_arguments():
    from ppokit.main_ppo import parse_main_ppo

    args, _, _ = parse_main_ppo(["actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
                                 "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
                                 "actor_rollout_ref.rollout.max_num_seqs=128"])
    kwargs = vllm_engine_kwargs(args, "/m", tp_layout(5, 8, rollout_tp_degree(args)), torch.bfloat16)
    assert (kwargs["gpu_memory_utilization"], kwargs["tensor_parallel_size"], kwargs["max_num_seqs"]) == (0.3, 4, 128)
    assert kwargs["seed"] == args.seed + 1  # rank 5 is in the second TP group of 4


@pytest.mark.parametrize("given, expected", [(None, 256), (8, 8), (64, 64)])
def test_max_num_seqs_is_vllms_default_unless_the_arguments_set_it(given, expected):
    keys = dict(seed=1, max_prompt_len=16, max_dec_len=16, max_length=32)
    if given is not None:
        keys["rollout_max_num_seqs"] = given
    args = load_arguments(None, overrides=keys)
    assert args.rollout_max_num_seqs == (given or 8)  # PaddleNLP's schema default stays the key's
    assert vllm_engine_kwargs(args, "/m", tp_layout(0, 1, 1, 1), torch.bfloat16)["max_num_seqs"] == expected
