"""The speed items of `run.py`: the device's roofline beside what this device measures, tokens/s of Qwen2.5 shapes
against it, and which attention kernels ppokit's own training forward and decoding loop launch."""

from __future__ import annotations

import time

import torch
from checks import grpo_steps, needs_cuda

# NVIDIA's datasheet figures (dense bf16 tensor-core FLOP/s, HBM bytes/s), matched against the device name
DATASHEET = {
    "H200": (989e12, 4.8e12),
    "H100": (989e12, 3.35e12),  # SXM; the PCIe card is lower (756 / 2.0), named "H100 PCIe"
    "H100 PCIe": (756e12, 2.0e12),
    "A100": (312e12, 2.0e12),  # 80 GB SXM; the 40 GB card reads 1.56 TB/s
    "A100-SXM4-40GB": (312e12, 1.56e12),
}

# Qwen2.5's published configs (config.json of Qwen/Qwen2.5-0.5B and -1.5B), built with the Qwen2 config class
QWEN25 = {
    "Qwen2.5-0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "Qwen2.5-1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                         max_position_embeddings=131072, rope_theta=1000000.0, rms_norm_eps=1e-6),
}
QWEN25_PARAMS = {"Qwen2.5-0.5B": 494_032_768, "Qwen2.5-1.5B": 1_543_714_304}  # counted by hand (test_gpu_check)


def datasheet(device_name: str) -> tuple[float, float] | None:
    """(bf16 FLOP/s, bytes/s) of the NVIDIA part named in `device_name` ("NVIDIA H200", "NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-80GB"), the longest matching key winning; None for a device not listed."""
    hits = [key for key in DATASHEET if key in device_name]
    return DATASHEET[max(hits, key=len)] if hits else None


def qwen25_config(name: str, **overrides):
    """Qwen2.5's published config `name` as a `Qwen2Config`, with `overrides` (a CPU trial's smaller sizes) applied
    before it is built (its per-layer lists follow num_hidden_layers)."""
    from transformers import Qwen2Config

    return Qwen2Config(**{**QWEN25[name], **overrides})


def measured_peaks(device) -> dict:
    """This device's bf16 matmul FLOP/s (8192^3, best of 5 timings of 10) and device-to-device copy bytes/s (1 GiB read
    and written, best of 5 timings of 10)."""
    n = 8192 if device.type == "cuda" else 512
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    src = torch.empty(2**28 if device.type == "cuda" else 2**22, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    flops, copy = [], []
    reps = 10  # per timing: a single 8192^3 matmul is ~1.5 ms on an H200, near the launch and timer overheads
    for _ in range(5):
        flops.append(reps * 2 * n**3 / timed(lambda: [a @ b for _ in range(reps)], device))
        copy.append(reps * 2 * src.numel() * 4 / timed(lambda: [dst.copy_(src) for _ in range(reps)], device))
    return {"matmul_bf16_flops": max(flops), "copy_bytes_per_s": max(copy)}


def timed(fn, device) -> float:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def roofline():
    """The datasheet's bf16 peak and bandwidth for this device beside a measured matmul peak and copy bandwidth."""
    device = needs_cuda()
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU (trial)"
    sheet = datasheet(name)
    measured = measured_peaks(device)
    figures = {"device": name, **measured, "datasheet_bf16_flops": sheet and sheet[0],
               "datasheet_bytes_per_s": sheet and sheet[1]}
    sheet_text = f"datasheet {sheet[0] / 1e12:.0f} TFLOP/s, {sheet[1] / 1e12:.2f} TB/s" if sheet else "no datasheet"
    return (f"{name}: measured {measured['matmul_bf16_flops'] / 1e12:.1f} TFLOP/s bf16 matmul, "
            f"{measured['copy_bytes_per_s'] / 1e12:.2f} TB/s copy; {sheet_text}"), figures


def tokens_per_s(names=tuple(QWEN25)):
    """Train tokens/s (forward + backward of 8 x 512 tokens) and decode tokens/s (32 rows, one token each) of the
    Qwen2.5 shapes (random weights, bf16), as shares of the datasheet peak (6 x params FLOP per trained token) and
    bandwidth (all bf16 weights read per decoding step). A CPU trial tries the code on the 0.5B shape cut to one
    layer and a 4096-token vocabulary (its figures mean nothing)."""
    device = needs_cuda()
    name_here = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU (trial)"
    peak, bandwidth = datasheet(name_here) or (None, None)
    figures, details = {}, []
    for name in names if device.type == "cuda" else names[:1]:
        config = qwen25_config(name, **({} if device.type == "cuda" else {"num_hidden_layers": 1, "vocab_size": 4096}))
        n, train_tps, decode_tps = shape_speed(config, device, (8, 512) if device.type == "cuda" else (1, 32))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        row = {"params": n, "train_tokens_per_s": train_tps, "decode_tokens_per_s": decode_tps}
        shares = ""
        if peak:
            row["train_share_of_bf16_peak"] = 6 * n * train_tps / peak
            row["decode_share_of_bandwidth"] = 2 * n * decode_tps / 32 / bandwidth
            shares = f" ({row['train_share_of_bf16_peak']:.0%} / {row['decode_share_of_bandwidth']:.0%} of peak)"
        figures[name] = row
        details.append(f"{name} ({n / 1e9:.2f} B) train {train_tps:,.0f}, decode {decode_tps:,.0f} tok/s{shares}")
    return "; ".join(details), figures


def shape_speed(config, device, shape) -> tuple[int, float, float]:
    """(parameters, train tokens/s, decode tokens/s) of a model built from `config` (random bf16 weights): the
    best of 2 forward+backward passes over `shape` (rows, tokens), the best of 5 one-token steps of 32 rows."""
    from transformers import AutoModelForCausalLM

    with torch.device(device):  # initialised where it runs (1.5 B random weights on the host take seconds)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, shape, device=device)
    train_s = min(timed(lambda: model(input_ids=ids, labels=ids).loss.backward(), device) for _ in range(2))
    model.zero_grad(set_to_none=True)
    step = torch.randint(0, config.vocab_size, (32, 1), device=device)
    with torch.no_grad():
        decode_s = min(timed(lambda: model(input_ids=step), device) for _ in range(5))
    return n, ids.numel() / train_s, 32 / decode_s  # the model is freed on return (the caller empties the cache)


# words in the CUDA kernel names of SDPA's backends: flash (pytorch_flash::flash_fwd...), memory-efficient
# (fmha_cutlassF...), cuDNN (cudnn...sdpa...), and the math path's softmax; flash-attn's own (flash_fwd...)
ATTENTION_WORDS = ("attention", "flash", "fmha", "sdpa", "cudnn", "softmax", "attn")


def attention_kernels():
    """Which kernels ppokit's masked training forward (`policy_forward` over a rollout batch, packed rows) and its
    decoding loop (`decode`) launch on CUDA, read from torch.profiler's kernel names, and each one's time. A CPU
    trial profiles the CPU's operators instead (their names say which SDPA path the CPU took)."""
    from checks import engine_of, tiny_batch
    from torch.profiler import ProfilerActivity, profile

    from ppokit.rollout.decode import decode
    from ppokit.testing import tiny_causal_lm, tiny_tokenizer
    from ppokit.training.device import to_model_device
    from ppokit.training.forward import policy_forward

    device = needs_cuda()
    on_gpu = device.type == "cuda"
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, arch="qwen2", hidden=256, layers=2).to(device)  # head_dim 64, as Qwen2.5-0.5B
    engine = engine_of(model, device, torch.bfloat16)
    batch = to_model_device(tiny_batch(tok), device)
    prompts = [tok.encode("hello"), tok.encode("a b c")]

    def decoding():  # as the hf rollout engine runs it: under autocast to the compute dtype
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
            decode(engine.module, prompts, 2, 16, [tok.eos_token_id], tok.pad_token_id)

    figures = {}
    for phase, run in (("training forward", lambda: policy_forward(engine, batch, 1024, "detached", torch.bfloat16,
                                                                   device)),
                       ("decoding loop", decoding)):
        run()  # warm-up
        with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as prof:
            run()
            if on_gpu:
                torch.cuda.synchronize()
        kernels = {e.key: getattr(e, "device_time_total" if on_gpu else "cpu_time_total", 0.0)
                   for e in prof.key_averages() if any(w in e.key.lower() for w in ATTENTION_WORDS)}
        figures[phase] = {"kernels_us": kernels}
    text = "; ".join(f"{phase}: " + (", ".join(f"{k[:60]} {us:.0f} us" for k, us in f["kernels_us"].items()) or
                                     "no attention kernel named") for phase, f in figures.items())
    return text, figures


def qwen_grpo_realistic(model_dir: str, work):
    """4 GRPO steps of the Qwen2.5-0.5B shape (random weights, the bundled tokenizer) under ZeRO-2 in bf16, prompts
    of ~256 tokens and responses of 512 (random weights rarely stop early): KL at step 0, rollout/logprob_diff, peak
    GPU memory and the time of each phase per step. A CPU trial: 2 steps of one small layer, 64 + 32 tokens."""
    trial = needs_cuda().type == "cpu"
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=49152)
    config = qwen25_config("Qwen2.5-0.5B", **(small if trial else {}))
    prompt, response = (64, 32) if trial else (256, 512)
    detail, figures = grpo_steps(model_dir, work, steps=2 if trial else 4, config=config, prompt_tokens=prompt, sharding="stage2",
                                 max_prompt_len=prompt, max_dec_len=response, max_length=prompt + response)
    per_step = [round(sum(t.values()), 1) for t in figures["timing"]]
    lengths = ", ".join(f"{x:.0f}" for x in figures["response_length/mean"] if x is not None)
    return f"{detail}; response lengths {lengths}; seconds per step {per_step}", figures
