"""`python -m ppokit.bench --compare vllm`: ppokit's own decoding loop (the hf engine) and vLLM on the same
prompts, sizes, sampling and compute dtype, in one process: generated tokens/s of each and their ratio.

Each engine generates the first batch once untimed (thread pools, vLLM's warm-up), then the timed batches.
"""

from __future__ import annotations

import time

import torch


def _timed(engine, batches, sampling) -> dict:
    from dataclasses import replace

    engine.generate(batches[0], replace(sampling, max_new_tokens=4))  # warm-up, untimed
    tokens, seconds = 0, 0.0
    for i, prompts in enumerate(batches):
        started = time.perf_counter()
        out = engine.generate(prompts, replace(sampling, seed=sampling.seed + i))
        seconds += time.perf_counter() - started
        tokens += sum(len(ids) for ids in out.response_ids)
    return {"generated_tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def compare_rollout(spec: dict, batches: int) -> dict:
    """{"ppokit": {...}, "vllm": {...}, "ratio": vLLM tokens/s / ppokit's, "setup": {...}} for `batches` rollout
    batches of the run described by `spec` (config + overrides, as the step bench takes)."""
    from ppokit.bench.trl_side import ppokit_side_inputs
    from ppokit.models import dtype_for, load_causal_lm
    from ppokit.rollout import HFRolloutEngine, SamplingParams, make_rollout_engine
    from ppokit.rollout.hf_engine import eos_token_ids

    spec = {**spec, "steps": batches}
    args, path, tokenizer, plan, records, _ = ppokit_side_inputs(spec)
    _, compute = dtype_for(args.bf16, args.fp16, "cpu")
    prompts = [r["_prompt_ids"] for r in records]
    step = plan.prompts_per_step
    groups = [prompts[i : i + step] for i in range(0, len(prompts), step)]
    sampling = SamplingParams(n=args.rollout_n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                              max_new_tokens=args.max_dec_len, seed=args.seed)
    model = load_causal_lm(path).eval()
    results = {"setup": {"model": path, "compute_dtype": str(compute), "prompts_per_batch": step,
                         "samples_per_prompt": args.rollout_n, "max_new_tokens": args.max_dec_len,
                         "batches": len(groups), "torch_threads": torch.get_num_threads()}}
    ours = HFRolloutEngine(model, tokenizer, dtype=compute if compute != torch.float32 else None)
    results["ppokit"] = _timed(ours, groups, sampling)
    vllm = make_rollout_engine("vllm", True, model, tokenizer, model_path=path, compute_dtype=compute, args=args)
    assert eos_token_ids(model, tokenizer) == vllm.eos_ids
    results["vllm"] = _timed(vllm, groups, sampling)
    results["ratio"] = results["vllm"]["tokens_per_s"] / results["ppokit"]["tokens_per_s"]
    return results


def format_rollout_table(results: dict) -> str:
    s = results["setup"]
    lines = [f"rollout: {s['batches']} batches x {s['prompts_per_batch']} prompts x {s['samples_per_prompt']} "
             f"samples, <= {s['max_new_tokens']} new tokens, {s['compute_dtype']}, {s['torch_threads']} torch threads",
             f"{'engine':<8} {'tokens':>8} {'seconds':>8} {'tokens/s':>9}"]
    for name in ("ppokit", "vllm"):
        r = results[name]
        lines.append(f"{name:<8} {r['generated_tokens']:>8} {r['seconds']:>8.2f} {r['tokens_per_s']:>9.1f}")
    lines.append(f"vLLM / ppokit: {results['ratio']:.2f}x")
    return "\n".join(lines)
