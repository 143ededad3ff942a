"""The items of `run.py`, one function each: each returns (detail, figures) when its claim holds, raises `Skip` when
it cannot be checked here (never reported as PASS), and raises anything else (AssertionError included) as FAIL."""

from __future__ import annotations

import copy
import os
import time

import torch

BF16_PEAK_FLOPS = 790e12  # H200 dense bf16, what the roofline figures are a share of
HBM_BYTES_PER_S = 4.3e12


class Skip(Exception):
    pass


def cpu_trial() -> bool:
    """GPU_CHECK_CPU_TRIAL=1: run the CUDA items on the CPU to try their code (their lines say TRIAL, not PASS)."""
    return os.environ.get("GPU_CHECK_CPU_TRIAL") == "1" and not torch.cuda.is_available()


def needs_cuda() -> torch.device:
    if cpu_trial():
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise Skip("no CUDA device")
    return torch.device("cuda", 0)


def device_here() -> torch.device:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def tiny(device, arch="llama"):
    from ppokit.testing import tiny_causal_lm, tiny_tokenizer

    tok = tiny_tokenizer()
    return tok, tiny_causal_lm(tok, arch=arch, seed=0).to(device)


def tiny_batch(tok):
    from ppokit.training.batch import build_batch

    gen = torch.Generator().manual_seed(0)
    prompts = [tok.encode("hi there"), tok.encode("what is 3+4?")]
    responses = [torch.randint(10, 200, (n,), generator=gen).tolist() for n in [5, 9, 12, 7]]
    return build_batch([{"src": ["p"]}] * 2, prompts, ["p"] * 2, [0, 0, 1, 1], responses, ["length"] * 4, tok)


def engine_of(model, device, compute_dtype, stage=0):
    from ppokit.engine import build_engine, deepspeed_config, init_distributed

    init_distributed()
    cfg = deepspeed_config(zero_stage=stage, offload_optimizer=False, micro_batch_size=4, grad_accum=1,
                           world_size=1, lr=1e-4, compute_dtype=compute_dtype, device=device)
    return build_engine(model, cfg)


def bf16_inside_the_engine():
    """With bf16 configured, every nn.Linear inside the DeepSpeed engine's training forward outputs bf16 (on CUDA,
    where DeepSpeed switches an outer autocast off)."""
    from ppokit.training.device import to_model_device
    from ppokit.training.forward import policy_forward

    device = needs_cuda()
    tok, model = tiny(device)
    engine = engine_of(model, device, torch.bfloat16)
    seen = []
    hooks = [m.register_forward_hook(lambda mod, i, o: seen.append(o.dtype) if "forward" not in vars(mod) else None)
             for m in engine.module.modules() if isinstance(m, torch.nn.Linear)]
    batch = to_model_device(tiny_batch(tok), device)
    logp, _ = policy_forward(engine, batch, 1024, "detached", torch.bfloat16, device)
    engine.backward(logp.sum())  # the backward under the engine's autocast too (DeepSpeed refuses a bare one)
    for h in hooks:
        h.remove()
    kinds = sorted({str(d) for d in seen})
    assert kinds == ["torch.bfloat16"], f"Linear outputs {kinds}"
    return f"{len(seen)} Linear outputs, all bf16", {"linear_outputs": len(seen)}


def kl_zero_at_step_zero():
    """Training forward (engine, with grad), old log-probs (engine.module) and the reference (a copy) in bf16 on the
    same micro-batch: equal to the bit, so KL is 0 at step 0."""
    from ppokit.training.device import to_model_device
    from ppokit.training.forward import batched_logprobs, policy_forward

    device = needs_cuda()
    tok, model = tiny(device)
    reference = copy.deepcopy(model).requires_grad_(False)
    engine = engine_of(model, device, torch.bfloat16)
    batch = tiny_batch(tok)
    trained, _ = policy_forward(engine, to_model_device(batch, device), 1024, "detached", torch.bfloat16, device)
    old = batched_logprobs(engine.module, batch, len(batch), 1024, torch.bfloat16, device)
    ref = batched_logprobs(reference, batch, len(batch), 1024, torch.bfloat16, device)
    trained = trained.detach().cpu() * batch.response_mask
    diff = max(float((trained - ref).abs().max()), float((old - ref).abs().max()))
    assert diff == 0.0, f"max |log-prob difference| {diff}"
    return "trainer == old == reference, to the bit", {"max_abs_diff": diff}


def packed_vs_unpacked():
    """Rows sharing a prompt packed into one row (the prompt once) give the log-probs of whole rows."""
    from ppokit.training.device import to_model_device
    from ppokit.training.forward import full_response_logits, packed_response_logits
    from ppokit.training.packing import can_pack

    device = device_here()
    tok, model = tiny(device, arch="qwen2")
    batch = to_model_device(tiny_batch(tok), device)
    assert can_pack(model, batch), "the packed path does not apply to the tiny Qwen2"
    with torch.no_grad():
        a = torch.log_softmax(full_response_logits(model, batch).float(), -1)
        b = torch.log_softmax(packed_response_logits(model, batch).float(), -1)
    diff = float((a - b).abs().max())
    assert diff < 1e-4, f"max |difference| {diff}"
    return f"max |difference| {diff:.2e} (float32, {device.type})", {"max_abs_diff": diff}


def greedy_loop_equals_generate():
    """ppokit's decoding loop, greedy, gives `model.generate`'s tokens (float32, TF32 off)."""
    from ppokit.rollout.decode import decode

    device = device_here()
    torch.backends.cuda.matmul.allow_tf32 = False
    tok, model = tiny(device)
    model.eval()
    prompts = [tok.encode("hello"), tok.encode("count: 1 2 3")]
    eos, pad = [tok.eos_token_id], tok.pad_token_id
    with torch.no_grad():
        ours = decode(model, prompts, 1, 16, eos, pad, do_sample=False).cpu()
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        mask = (torch.arange(width, device=device)[None] >= torch.tensor([width - len(p) for p in prompts],
                                                                        device=device)[:, None]).long()
        theirs = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=16, do_sample=False,
                                eos_token_id=eos, pad_token_id=pad)[:, width:].cpu()
    T = min(ours.shape[1], theirs.shape[1])
    assert torch.equal(ours[:, :T], theirs[:, :T]), f"ours {ours.tolist()} generate {theirs.tolist()}"
    return f"{len(prompts)} prompts x {T} tokens equal ({device.type})", {"tokens": int(T)}


def sdpa_kernels():
    """SDPA's flash and memory-efficient kernels run for bf16 causal attention of the shapes training uses."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = needs_cuda()
    q, k, v = (torch.randn(4, 14, 512, 64, device=device, dtype=torch.bfloat16) for _ in range(3))
    out = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        with sdpa_kernel([backend]):
            out[name] = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    diff = float((out["flash"].float() - out["efficient"].float()).abs().max())
    assert diff < 2e-2, f"flash vs efficient differ by {diff}"
    return f"both ran; max |flash - efficient| {diff:.1e}", {"flash_vs_efficient": diff}


def roofline(config_path: str, shapes: dict):
    """Decode tokens/s (32 rows, one token each, against the weights-read bound) and train tokens/s (forward +
    backward of 8 x 512 tokens, against the bf16 peak) for models built from configs (random weights)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    device = needs_cuda()
    figures, details = {}, []
    for name, overrides in shapes.items():
        config = AutoConfig.from_pretrained(config_path, **overrides)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).to(device)
        n = sum(p.numel() for p in model.parameters())
        ids = torch.randint(0, config.vocab_size, (8, 512), device=device)
        for _ in range(2):  # warm-up, then timed
            torch.cuda.synchronize()
            t = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            torch.cuda.synchronize()
            train_s = time.perf_counter() - t
        model.zero_grad(set_to_none=True)
        step = torch.randint(0, config.vocab_size, (32, 1), device=device)
        with torch.no_grad():
            model(input_ids=step)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(20):
                model(input_ids=step)
            torch.cuda.synchronize()
            decode_s = (time.perf_counter() - t) / 20
        train_tps, decode_tps = ids.numel() / train_s, 32 / decode_s
        figures[name] = {"params": n, "train_tokens_per_s": train_tps, "decode_tokens_per_s": decode_tps,
                         "train_share_of_bf16_peak": 6 * n * train_tps / BF16_PEAK_FLOPS,
                         "decode_share_of_bandwidth": 2 * n / decode_s / HBM_BYTES_PER_S}
        details.append(f"{name} train {train_tps:,.0f} tok/s ({figures[name]['train_share_of_bf16_peak']:.0%}), "
                       f"decode {decode_tps:,.0f} tok/s ({figures[name]['decode_share_of_bandwidth']:.0%})")
        del model
        torch.cuda.empty_cache()
    return "; ".join(details), figures


def random_model_folder(model_dir: str, dest) -> str:
    """A folder with the bundled model's config and tokenizer and random weights built from that config."""
    import shutil
    from pathlib import Path

    from transformers import AutoConfig, AutoModelForCausalLM

    dest = Path(dest)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir)).save_pretrained(dest)
    for f in Path(model_dir).iterdir():
        if f.name != "config.json":
            shutil.copy(f, dest / f.name)
    return str(dest)


def grpo_session(model_dir: str, work, **extra):
    import json
    from pathlib import Path

    from ppokit.args import load_arguments
    from ppokit.session import Session
    from ppokit.testing import distinct_chars

    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    data = work / "train.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"What is {i} + {i + 3}?"}) for i in range(64)) + "\n")
    keys = dict(actor_model_name_or_path=random_model_folder(model_dir, work / "model"), train_datasets=str(data),
                rl_algorithm="grpo", global_batch_size=8, rollout_n=4, global_mini_batch_size=8,
                per_device_train_batch_size=8, max_dec_len=32, max_prompt_len=64, max_length=96, max_steps=4,
                bf16=True, kl_loss_coeff=0.01, rollout_engine="hf", output_dir=str(work / "out"),
                logging_dir=str(work / "vdl"), report_to=["none"], disable_tqdm=True, save_strategy="no",
                logging_steps=1, seed=1)
    keys.update(extra)
    return Session(load_arguments(None, overrides=keys), reward_functions=[distinct_chars])


def grpo_hf_steps(model_dir: str, work):
    """4 GRPO steps (bundled model's shape, random weights, bf16, KL loss) with the hf engine: KL 0 at step 0, the
    rollout/trainer log-prob difference small, every loss finite."""
    needs_cuda()
    s = grpo_session(model_dir, work)
    steps = [s.step() for _ in range(4)]
    diffs = [m["rollout/logprob_diff"] for m in steps]
    assert steps[0]["actor/kl"] == 0.0, f"KL at step 0 is {steps[0]['actor/kl']}"
    assert max(diffs) < 0.05, f"rollout/logprob_diff {diffs}"
    assert all(torch.isfinite(torch.tensor(m["actor/pg_loss"])) for m in steps)
    return f"logprob_diff {', '.join(f'{d:.1e}' for d in diffs)}", {"rollout/logprob_diff": diffs,
                                                                    "reward/mean": [m["reward/mean"] for m in steps]}


def zero3_steps_and_save(model_dir: str, work):
    """2 GRPO steps under ZeRO-3 and a checkpoint; the peak GPU memory of the whole."""
    from pathlib import Path

    on_gpu = needs_cuda().type == "cuda"
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    s = grpo_session(model_dir, work, sharding="stage3", max_steps=2)
    for _ in range(2):
        s.step()
    s.save()
    peak = torch.cuda.max_memory_allocated() if on_gpu else 0
    saved = [p for p in Path(work, "out").rglob("*.safetensors")]
    assert saved, "no weights were saved"
    return f"saved {len(saved)} weight files; peak {peak / 2**30:.2f} GiB", {"peak_bytes": peak}
