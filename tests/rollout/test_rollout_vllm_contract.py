"""The VLLMRolloutEngine contract on CPU, against a fake `vllm` module (tests/rollout/fake_vllm.py).

Ranks are threads named rank0..rankW-1; a tensor-parallel group's members exchange prompts through a
barrier instead of torch.distributed. What is pinned: LLM(...) arguments per rank and TP group,
requests per engine and responses back on the ranks that own the prompts, sampling parameters,
the sleep/wake order around generation and weight loading, and the weight names sent.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import fake_vllm
import pytest
import torch

from ppokit.args import load_arguments
from ppokit.models.weights import hf_state
from ppokit.rollout import SamplingParams, VLLMRolloutEngine, tp_layout, vllm_engine_kwargs
from ppokit.testing import tiny_causal_lm, tiny_tokenizer

TOK = tiny_tokenizer()
EOS = TOK.eos_token_id
MODEL = tiny_causal_lm(TOK, seed=0)
HF_NAMES = {name for name, _ in hf_state(MODEL)}


class ThreadGroup:
    """A TP group of threads: all_gather through a shared board and a barrier."""

    def __init__(self, board: dict, index: int, size: int):
        self.board, self.index, self.size = board, index, size

    def all_gather(self, obj) -> list:
        self.board["slots"][self.index] = obj
        self.board["barrier"].wait()
        out = list(self.board["slots"])
        self.board["barrier"].wait()
        return out


def run_ranks(world: int, tp: int, body):
    """body(rank, group) on `world` threads (TP groups of `tp` consecutive ranks); their results by rank."""
    boards = [{"slots": [None] * tp, "barrier": threading.Barrier(tp, timeout=30)} for _ in range(world // tp)]
    results, errors = [None] * world, []

    def target(rank):
        try:
            results[rank] = body(rank, ThreadGroup(boards[rank // tp], rank % tp, tp))
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after every thread ended
            errors.append(exc)
            boards[rank // tp]["barrier"].abort()

    threads = [threading.Thread(target=target, args=(r,), name=f"rank{r}") for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture()
def vllm(monkeypatch):
    return fake_vllm.install(monkeypatch)


def arguments(**extra):
    keys = dict(seed=42, rollout_max_num_seqs=16, max_prompt_len=32, max_dec_len=8, max_length=40,
                gpu_memory_utilization=0.35, bf16=True)
    keys.update(extra)
    return load_arguments(None, overrides=keys)


def engine_for(rank: int, world: int, args, group) -> VLLMRolloutEngine:
    layout = tp_layout(rank, world, args.rollout_tensor_parallel_degree)
    return VLLMRolloutEngine(vllm_engine_kwargs(args, "/models/actor", layout, torch.bfloat16), TOK, [EOS], group)


def prompts_of(rank: int) -> list[list[int]]:
    return [[10 * rank + 11, 7, 50 + rank], [10 * rank + 12, 60 + rank]]


def engines_by_rank(vllm) -> dict[int, object]:
    return {int(llm.rank.removeprefix("rank")): llm for llm in vllm.LLM.instances}


def test_four_ranks_in_two_tp_groups(vllm):
    args = arguments(rollout_tensor_parallel_degree=2)
    sampling = SamplingParams(n=2, temperature=0.9, max_new_tokens=8)

    def body(rank, group):
        engine = engine_for(rank, 4, args, group)
        engine.update_weights(MODEL)
        return engine.generate(prompts_of(rank), sampling)

    outputs = run_ranks(4, 2, body)
    llms = engines_by_rank(vllm)
    seeds = {}
    for rank, llm in llms.items():
        assert llm.kwargs == dict(
            model="/models/actor", tensor_parallel_size=2, distributed_executor_backend="external_launcher",
            gpu_memory_utilization=0.35, max_num_seqs=16, max_model_len=40, dtype="bfloat16",
            seed=42 + rank // 2,  # the same seed within a TP group, one per group
            enable_sleep_mode=True, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
            disable_custom_all_reduce=True,
        )
        # both members of a group generate the group's prompts, in group order, one request per sample
        first = rank - rank % 2
        assert llm.requests == [[p for p in prompts_of(first) + prompts_of(first + 1) for _ in range(2)]]
        # training requests carry no seed of their own (vLLM's sampler would loop over per-request generators):
        # they draw from the engine's generator, reseeded just before the call
        assert all(kw == dict(n=1, max_tokens=8, min_tokens=0, temperature=0.9, top_p=1.0, top_k=-1,
                              repetition_penalty=1.0, stop_token_ids=[EOS], skip_special_tokens=False,
                              detokenize=False, logprobs=0) for kw in llm.sampling[0])
        seeds[rank] = llm.noise_seeds[0]
        assert seeds[rank] is not None and seeds[rank] != llm.kwargs["seed"]  # reseeded, not the start-up seed
        assert not llm.problems
    # the group leader's reseed: TP members sample alike, the groups differently
    assert seeds[0] == seeds[1] and seeds[2] == seeds[3] and seeds[0] != seeds[2]
    for rank, out in enumerate(outputs):  # every rank gets the answers to its own prompts
        own = prompts_of(rank)
        assert out.prompt_index == [0, 0, 1, 1]
        assert [ids[:2] + ids[3:] for ids in out.response_ids] == [[own[i][0], own[i][-1], EOS] for i in (0, 0, 1, 1)]
        assert out.response_ids[0][2] != out.response_ids[1][2]  # the samples of a prompt differ
        assert out.finish_reasons == ["stop"] * 4
        assert out.logprobs == [[-0.1, -0.2, -0.3, -0.4]] * 4


@pytest.mark.parametrize("old_reload", [False, True], ids=["reload_weights(weights_iterator)", "vllm<PR32133"])
def test_sleep_wake_and_weight_sync_order(monkeypatch, old_reload):
    """Both vLLM generations the pyproject floor admits get the trained weights: through `reload_weights` where it
    takes them, through the model's `load_weights` where `reload_weights()` takes no arguments (it would raise
    TypeError if given the weights, or reread the original folder if called bare)."""
    vllm = fake_vllm.install(monkeypatch, old_reload=old_reload)
    args = arguments()
    model = tiny_causal_lm(TOK, seed=0)
    engine = engine_for(0, 1, args, None)
    llm = vllm.LLM.instances[0]
    assert llm.events == [("sleep", 1)]  # asleep from construction until the first rollout
    engine.update_weights(model)
    assert llm.events == [("sleep", 1)]  # marking only: the weights are loaded after waking up
    sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=4)
    engine.generate([[5, 6]], sampling)

    def cycle(events):
        """(weight names loaded, the events with each run of load_weights calls shown once)."""
        names = [n for e, d in events if e == "load_weights" for n in d]
        order = [e for i, (e, _) in enumerate(events) if not (e == "load_weights" and events[i - 1][0] == e)]
        return names, order

    names, order = cycle(llm.events[1:])
    assert order == ["wake_up", "load_weights", "wake_up", "reset_prefix_cache", "generate", "sleep"]
    assert [d for e, d in llm.events if e == "wake_up"] == [("weights",), ("kv_cache",)]
    assert set(names) == HF_NAMES and len(names) == len(HF_NAMES)  # every weight once, HF names
    for name, tensor in hf_state(model):
        torch.testing.assert_close(llm.loaded[name], tensor.to(torch.bfloat16))  # in the engine's dtype

    with torch.no_grad():  # an optimizer step
        for p in model.parameters():
            p.mul_(2.0)
    engine.update_weights(model)
    start = len(llm.events)
    engine.generate([[5, 6]], sampling)
    names, order = cycle(llm.events[start:])
    assert order == ["wake_up", "load_weights", "wake_up", "reset_prefix_cache", "generate", "sleep"]
    for name, tensor in hf_state(model):
        torch.testing.assert_close(llm.loaded[name], tensor.to(torch.bfloat16))  # the trained weights, not the old

    start = len(llm.events)
    engine.generate([[5, 6]], sampling)  # no update in between: nothing to load
    assert [e for e, _ in llm.events[start:]] == ["wake_up", "wake_up", "reset_prefix_cache", "generate", "sleep"]
    assert not llm.problems and ("reload_from_disk", None) not in llm.events


def test_the_caching_allocator_is_emptied_before_every_wake_up(vllm, monkeypatch):
    engine = engine_for(0, 1, arguments(), None)
    llm = vllm.LLM.instances[0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU machine, as far as the engine can tell
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: llm._log("empty_cache"))
    for _ in range(2):
        engine.update_weights(MODEL)
        engine.generate([[5, 6]], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    events = [e for e, _ in llm.events if e in ("empty_cache", "wake_up", "generate")]
    assert events == ["empty_cache", "wake_up", "wake_up", "generate"] * 2  # the update's activations freed first


def test_without_a_sleep_mode_the_engine_stays_awake_and_says_so(monkeypatch, caplog):
    vllm = fake_vllm.install(monkeypatch, sleep_mode=False)
    engine = engine_for(0, 1, arguments(), None)
    llm = vllm.LLM.instances[0]
    assert llm.kwargs["enable_sleep_mode"] is False and not engine.can_sleep
    assert llm.kwargs["enforce_eager"] is True  # the fake platform without sleep mode is a CPU
    assert "no sleep mode on this platform" in caplog.text
    engine.update_weights(MODEL)
    engine.generate([[5, 6]], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    order = [e for i, (e, _) in enumerate(llm.events) if not (e == "load_weights" and llm.events[i - 1][0] == e)]
    assert order == ["load_weights", "reset_prefix_cache", "generate"] and not llm.problems


def test_trainer_threads_are_restored_after_vllm_changes_them(monkeypatch):
    from ppokit.rollout.vllm_engine import trainer_threads_kept

    threads, setter = torch.get_num_threads(), torch.set_num_threads
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    with trainer_threads_kept():  # what vLLM's CPU worker and platform do
        torch.set_num_threads(1)
        torch.set_num_threads = lambda n: None
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        monkeypatch.setenv("LD_PRELOAD", "libgomp.so.1")
    assert torch.set_num_threads is setter and torch.get_num_threads() == threads
    assert __import__("os").environ["LOCAL_WORLD_SIZE"] == "4" and "LD_PRELOAD" not in __import__("os").environ


def test_lora_weights_are_sent_merged_under_base_names(vllm):
    from ppokit.models import LoraSpec, apply_lora

    model = apply_lora(tiny_causal_lm(TOK, seed=0), LoraSpec(rank=4, alpha=8))
    engine = engine_for(0, 1, arguments(), None)
    engine.update_weights(model)
    engine.generate([[5, 6]], SamplingParams(n=1, temperature=1.0, max_new_tokens=4))
    assert set(vllm.LLM.instances[0].loaded) == HF_NAMES


def test_seeded_evaluation_of_the_same_prompts_is_generated_once_per_group(vllm):
    args = arguments(rollout_tensor_parallel_degree=2)
    sampling = SamplingParams(n=2, temperature=0.8, max_new_tokens=8, seed=7)
    prompts = [[21, 22], [23, 24, 25]]
    outputs = run_ranks(2, 2, lambda rank, group: engine_for(rank, 2, args, group).generate(prompts, sampling))
    for llm in vllm.LLM.instances:
        assert llm.requests == [[p for p in prompts for _ in range(2)]]  # one request per sample, once
        assert [kw["seed"] for kw in llm.sampling[0]] == [7, 8, 9, 10] and {kw["n"] for kw in llm.sampling[0]} == {1}
        assert llm.noise_seeds == [None]  # every request had its own generator
    assert outputs[0].response_ids == outputs[1].response_ids


def test_seeded_chunks_of_a_group_are_seeded_as_each_rank_alone(vllm):
    """A sharded evaluation gives the members of a TP group different chunks with different seeds: each member's
    requests keep its own seeds, so its answers are the ones it would get generating alone (or on one rank)."""
    args = arguments(rollout_tensor_parallel_degree=2)
    sampling = SamplingParams(n=2, temperature=0.8, max_new_tokens=8)

    def body(rank, group):
        return engine_for(rank, 2, args, group).generate(prompts_of(rank), replace(sampling, seed=100 * rank + 5))

    outputs = run_ranks(2, 2, body)
    for llm in vllm.LLM.instances:
        assert [kw["seed"] for kw in llm.sampling[0]] == [5, 6, 7, 8, 105, 106, 107, 108]
    alone = engine_for(0, 1, arguments(), None).generate(prompts_of(1), replace(sampling, seed=105))
    assert outputs[1].response_ids == alone.response_ids


def test_greedy_calls_carry_no_seeds_and_leave_the_generator_alone(vllm):
    engine = engine_for(0, 1, arguments(), None)
    llm = vllm.LLM.instances[0]
    for seed in (None, 3):
        engine.generate([[5, 6]], SamplingParams(n=2, temperature=0.0, max_new_tokens=4, seed=seed))
    assert all("seed" not in kw for call in llm.sampling for kw in call)
    assert fake_vllm._device.seeds[-1] == 42  # still the start-up seed: greedy decoding draws no noise


def test_training_calls_repeat_from_the_trainers_stream_and_keep_it(vllm):
    """An unseeded (training) call reseeds the engine from one draw of the trainer's torch stream: the same stream
    gives the same samples (a rerun, a resume that restores it), the next call other samples, and the trainer's
    stream moves by that one draw only, whatever the engine draws."""
    engine = engine_for(0, 1, arguments(), None)
    sampling = SamplingParams(n=4, temperature=1.0, max_new_tokens=8)
    torch.manual_seed(11)
    first = engine.generate(prompts_of(0), sampling)
    after = torch.get_rng_state()
    second = engine.generate(prompts_of(0), sampling)
    torch.manual_seed(11)
    engine.generate([[9, 9]], replace(sampling, seed=3))  # a seeded call (evaluation) leaves the stream alone
    again = engine.generate(prompts_of(0), sampling)
    assert again.response_ids == first.response_ids and second.response_ids != first.response_ids
    assert len({tuple(ids) for ids in first.response_ids[:4]}) == 4  # the samples of one prompt differ
    torch.manual_seed(11)
    torch.randint(2**62, (1,))
    assert torch.equal(torch.get_rng_state(), after)
    assert [{"seed" in kw for kw in call} for call in vllm.LLM.instances[0].sampling] == [{False}] * 2 + [{True}, {False}]


def test_ranks_of_a_group_must_sample_alike(vllm):
    args = arguments(rollout_tensor_parallel_degree=2)

    def body(rank, group):
        engine = engine_for(rank, 2, args, group)
        return engine.generate(prompts_of(rank), SamplingParams(n=1, temperature=0.5 + rank, max_new_tokens=4))

    with pytest.raises(RuntimeError, match="different sampling settings"):
        run_ranks(2, 2, body)


def test_make_rollout_engine_builds_vllm_from_the_arguments(vllm, tiny_model_dir):
    from ppokit.models import load_causal_lm, load_tokenizer
    from ppokit.rollout import make_rollout_engine

    tok = load_tokenizer(tiny_model_dir)
    model = load_causal_lm(tiny_model_dir)
    args = arguments(rollout_max_num_seqs=64, fp16=True, bf16=False, seed=3)
    engine = make_rollout_engine("vllm", True, model, tok, model_path=tiny_model_dir, compute_dtype=torch.float16,
                                 args=args, gpu_memory_utilization=0.2)
    assert isinstance(engine, VLLMRolloutEngine)
    kwargs = vllm.LLM.instances[0].kwargs
    assert (kwargs["model"], kwargs["dtype"], kwargs["max_num_seqs"], kwargs["seed"]) == (tiny_model_dir, "float16",
                                                                                          64, 3)
    assert kwargs["gpu_memory_utilization"] == 0.2  # an explicit override wins over the key
    out = engine.generate([tok("hi").input_ids], SamplingParams(n=2, temperature=1.0, max_new_tokens=8))
    assert out.finish_reasons == ["stop", "stop"] and len(out.logprobs[0]) == 4
    assert set(vllm.LLM.instances[0].loaded) == {n for n, _ in hf_state(model)}  # synced before the first rollout
