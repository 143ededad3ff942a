"""Direct GPU checks for scripts/gpu_smoke.sh (issue #30): python scripts/gpu_smoke_probe.py OUT_DIR [ITEM ...].

Writes OUT_DIR/probe.json, {item: {"status": "PASS" | "FAIL" | "SKIP", "detail": "..."}}, one entry per item run:
  device      a CPU-built rollout batch through old/reference log-probs, values and PTX on a CUDA model (fault 1)
  attention   flash-attention-2 only for bf16/fp16, SDPA otherwise; the reference's attention = the actor's (fault 5)
  zero3       a ZeRO-3 model loads partitioned on the GPU and saves module by module: the save's peak extra GPU
              memory stays under half the model's size (fault 7)
Each item is caught on its own, so one failure does not hide the others. Run under `bash scripts/gpu_smoke.sh`.
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path

import torch


def rollout_batch(tok):
    """2 prompts x 2 responses, built on the CPU as the rollout phase builds them."""
    from ppokit.training.batch import build_batch

    prompts = [tok.encode("say a:"), tok.encode("count to three, then")]
    responses = [tok.encode(t) for t in ("aa a", "b", "one two", "x y z w")]
    records = [{"prompt": "0"}, {"prompt": "1"}]
    return build_batch(records, prompts, ["0", "1"], [0, 0, 1, 1], responses, ["stop"] * 4, tok)


def check_device(cuda) -> str:
    from ppokit.models.value import ValueModel
    from ppokit.testing import tiny_causal_lm, tiny_tokenizer
    from ppokit.training.forward import batched_logprobs, batched_values
    from ppokit.training.ptx import ptx_nll

    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok).to(cuda)
    batch = rollout_batch(tok)
    logp = batched_logprobs(model, batch, 2, 64, torch.float32, cuda)
    on_cpu = batched_logprobs(model.cpu(), batch, 4, 64, torch.float32, "cpu")
    model.to(cuda)
    diff = float((logp - on_cpu).abs().max())
    assert diff < 1e-3, f"GPU and CPU log-probs differ by {diff}"
    critic = ValueModel(model.model, torch.nn.Linear(model.config.hidden_size, 1).to(cuda))
    values = batched_values(critic, batch, 2, torch.float32, cuda)
    records = [{"_prompt_ids": tok.encode("q: 1+1"), "label": "2"}]
    nll = ptx_nll(model, records, tok, 64, torch.float32, cuda)
    nll.backward()
    return (f"log-probs (packed, CPU batch -> {cuda}) match the CPU's within {diff:.1e}; values {tuple(values.shape)}; "
            f"PTX NLL {float(nll.detach()):.3f} with gradients")


def check_attention(cuda) -> str:
    import importlib.util

    from ppokit.models import attention_implementation, load_causal_lm, load_reference
    from ppokit.testing import save_tiny_model

    assert attention_implementation(True, torch.float32) == "sdpa", "float32 must not pick flash-attention-2"
    folder = save_tiny_model(Path(tempfile.mkdtemp()) / "m")
    if importlib.util.find_spec("flash_attn") is None:
        return "SKIP: flash-attn is not installed (float32 -> SDPA checked); pip install flash-attn to check FA2"
    impl = attention_implementation(True, torch.bfloat16)
    assert impl == "flash_attention_2", f"bf16 with flash-attn installed picked {impl}"
    actor = load_causal_lm(folder, device=cuda, attn_implementation=impl)
    reference = load_reference(actor, folder, device=cuda)
    assert reference.config._attn_implementation == impl, reference.config._attn_implementation
    ids = torch.randint(10, 200, (2, 12), device=cuda)
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
        a = actor(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        r = reference(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert torch.equal(a, r), "actor and reference differ at step 0"
    return "float32 -> SDPA; bf16 -> flash_attention_2, a bf16 forward runs, the reference uses it too (equal logits)"


def check_zero3(cuda) -> str:
    from ppokit.engine import build_engine, deepspeed_config, init_distributed
    from ppokit.models import load_causal_lm
    from ppokit.models.folders import save_hf
    from ppokit.testing import save_tiny_model, tiny_tokenizer

    init_distributed()
    cfg = deepspeed_config(zero_stage=3, offload_optimizer=False, micro_batch_size=1, grad_accum=1, world_size=1,
                           lr=1e-5, device=cuda)
    tmp = Path(tempfile.mkdtemp())
    folder = save_tiny_model(tmp / "m", hidden=512, layers=8)
    model = load_causal_lm(folder, zero3_config=cfg)
    shard = [p.ds_tensor for p in model.parameters()]
    assert all(hasattr(p, "ds_id") and p.numel() == 0 for p in model.parameters()), "not partitioned at load"
    assert all(s.device.type == "cuda" for s in shard), "shards are not on the GPU"
    engine = build_engine(model, cfg)
    size = sum(s.numel() * s.element_size() for s in shard)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    save_hf(engine.module, tiny_tokenizer(), tmp / "saved")
    extra = torch.cuda.max_memory_allocated() - before
    assert extra < size / 2, f"saving took {extra / 2**20:.1f} MiB extra GPU memory for a {size / 2**20:.1f} MiB model"
    reloaded = load_causal_lm(str(tmp / "saved"))
    assert sum(p.numel() for p in reloaded.parameters()) > 0
    return f"partitioned on {shard[0].device}; save peak +{extra / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB model"


CHECKS = {"device": check_device, "attention": check_attention, "zero3": check_zero3}


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.device("cuda", 0)
    results = {}
    for name in argv[1:] or list(CHECKS):
        try:
            detail = CHECKS[name](cuda)
            status = "SKIP" if detail.startswith("SKIP: ") else "PASS"
            detail = detail.removeprefix("SKIP: ")
        except Exception as exc:  # a probe reports every failure, it does not stop at the first
            status, detail = "FAIL", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
        results[name] = {"status": status, "detail": detail}
        print(f"probe {name}: {status}: {detail.splitlines()[0] if detail else ''}", flush=True)
    (out / "probe.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
