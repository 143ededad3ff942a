"""The vLLM engine itself; runs only where vLLM (and a GPU) is available."""

import pytest
import torch

from ppokit.rollout import SamplingParams, VLLMRolloutEngine, vllm_available

pytestmark = pytest.mark.skipif(
    not vllm_available() or not torch.cuda.is_available(),
    reason="vLLM is not installed (it does not install on CPU machines)",
)


def test_vllm_matches_the_protocol(tiny_model_dir):
    from ppokit.models import load_causal_lm, load_tokenizer
    from ppokit.rollout import make_rollout_engine

    tok = load_tokenizer(tiny_model_dir)
    model = load_causal_lm(tiny_model_dir, device="cuda")
    from ppokit.args import load_arguments

    args = load_arguments(None, overrides=dict(max_prompt_len=64, max_dec_len=16, max_length=80, seed=0))
    engine = make_rollout_engine("vllm", True, model, tok, model_path=tiny_model_dir, args=args,
                                 gpu_memory_utilization=0.2)
    assert isinstance(engine, VLLMRolloutEngine)
    prompts = [tok("hello").input_ids, tok("hi there").input_ids]
    out = engine.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=1))
    assert out.prompt_index == [0, 0, 0, 1, 1, 1] and len(out.response_ids) == 6
    for ids, reason in zip(out.response_ids, out.finish_reasons):
        assert (reason == "length") == (len(ids) == 8 and tok.eos_token_id not in ids)
    again = engine.generate(prompts, SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=1))
    assert again.response_ids == out.response_ids
    assert [len(lp) for lp in out.logprobs] == [len(ids) for ids in out.response_ids]
    assert all(v <= 0 for lp in out.logprobs for v in lp)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.0)
    engine.update_weights(model)  # all-zero weights: uniform logits, greedy picks token 0
    greedy = engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_new_tokens=3))
    assert greedy.response_ids[0][0] == 0
