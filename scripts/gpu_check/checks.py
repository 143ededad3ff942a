"""The items of `run.py`, one function each: each returns (detail, figures) when its claim holds, raises `Skip` when
it cannot be checked here (never reported as PASS), and raises anything else (AssertionError included) as FAIL."""

from __future__ import annotations

import copy
import os

import torch


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


# a CPU trial tries the GPU items' code on a small model of the bundled config's family (minutes become seconds)
TRIAL_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=16)


def random_model_folder(model_dir: str, dest, config=None) -> str:
    """A folder with the bundled model's tokenizer and random weights built from `config` (default: the bundled
    model's, shrunk to TRIAL_SHAPE in a CPU trial)."""
    import shutil
    from pathlib import Path

    from transformers import AutoConfig, AutoModelForCausalLM

    dest = Path(dest)
    config = config or AutoConfig.from_pretrained(model_dir, **(TRIAL_SHAPE if cpu_trial() else {}))
    AutoModelForCausalLM.from_config(config).save_pretrained(dest)
    for f in Path(model_dir).iterdir():
        if f.name != "config.json":
            shutil.copy(f, dest / f.name)
    return str(dest)


def grpo_session(model_dir: str, work, config=None, prompt_tokens: int = 0, **extra):
    """A GRPO Session on a random model (`random_model_folder`) over 64 arithmetic prompts, each padded with numbers
    to about `prompt_tokens` tokens when given; `extra` replaces the keys below."""
    import json
    from pathlib import Path

    from ppokit.args import load_arguments
    from ppokit.session import Session
    from ppokit.testing import distinct_chars

    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    data = work / "train.jsonl"
    filler = long_prompt_filler(model_dir, prompt_tokens) if prompt_tokens else ""
    data.write_text("\n".join(json.dumps({"prompt": f"{filler}What is {i} + {i + 3}?"}) for i in range(64)) + "\n")
    folder = random_model_folder(model_dir, work / "model", config)
    keys = dict(actor_model_name_or_path=folder, train_datasets=str(data),
                rl_algorithm="grpo", global_batch_size=8, rollout_n=4, global_mini_batch_size=8,
                per_device_train_batch_size=8, max_dec_len=32, max_prompt_len=64, max_length=96, max_steps=4,
                bf16=True, kl_loss_coeff=0.01, rollout_engine="hf", output_dir=str(work / "out"),
                logging_dir=str(work / "vdl"), report_to=["none"], disable_tqdm=True, save_strategy="no",
                logging_steps=1, seed=1)
    if extra.get("rl_algorithm") == "ppo":  # the critic starts from the actor's weights (a value head added)
        keys.update(critic_model_name_or_path=keys["actor_model_name_or_path"], kl_loss_coeff=0.0)
    keys.update(extra)
    return Session(load_arguments(None, overrides=keys), reward_functions=[distinct_chars])


def long_prompt_filler(model_dir: str, tokens: int) -> str:
    """Numbers separated by spaces, `tokens` - 40 tokens long under the bundled tokenizer (room for the question and
    the chat template within a `max_prompt_len` of `tokens`)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    words = []
    while len(tok.encode(" ".join(words), add_special_tokens=False)) < tokens - 40:
        words += [str(len(words) % 97)] * 4
    return "Numbers: " + " ".join(words) + ". "


# Step 0's KL: the reference's log-probs come from consecutive micro-batches of `per_device_logprob_batch_size` rows,
# the update's from micro-batches sorted by length (packing), so on a GPU the bf16 matmuls of one token run in
# different shapes and round differently: per-token |log-prob difference| ~1e-2 in bf16, and the k3 estimator of a
# difference d is ~d^2/2 per token. Exactly 0 holds only where the shapes match (item "KL 0 at step 0").
STEP0_KL_BOUND = 1e-3


def grpo_steps(model_dir: str, work, steps: int = 4, save: bool = False, **extra):
    """`steps` GRPO steps (bundled model's shape, random weights, KL loss) with the hf engine and `extra` keys: KL at
    step 0 under STEP0_KL_BOUND, the rollout/trainer log-prob difference small, every loss finite; with `save`, a
    checkpoint after them whose extra GPU memory is measured (ZeRO-3 gathers module by module)."""
    from pathlib import Path

    device = needs_cuda()
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    s = grpo_session(model_dir, work, max_steps=steps, **extra)
    done = [s.step() for _ in range(steps)]
    diffs = [m["rollout/logprob_diff"] for m in done]
    kl0 = done[0]["actor/kl"]
    assert abs(kl0) < STEP0_KL_BOUND, f"KL at step 0 is {kl0} (bound {STEP0_KL_BOUND}; see STEP0_KL_BOUND)"
    assert max(diffs) < 0.05, f"rollout/logprob_diff {diffs}"
    assert all(torch.isfinite(torch.tensor(m["actor/pg_loss"])) for m in done)
    figures = {"actor/kl_step0": kl0, "rollout/logprob_diff": diffs, "reward/mean": [m["reward/mean"] for m in done],
               "peak_bytes": torch.cuda.max_memory_allocated() if on_gpu else 0,
               "response_length/mean": [m.get("response_length/mean") for m in done],
               "timing": [{k: v for k, v in m.items() if k.startswith("timing/")} for m in done]}
    detail = (f"KL0 {kl0:.1e}; logprob_diff {', '.join(f'{d:.1e}' for d in diffs)}; "
              f"peak {figures['peak_bytes'] / 2**30:.2f} GiB")
    if save:
        before = torch.cuda.memory_allocated() if on_gpu else 0
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        s.save()
        figures["save_extra_bytes"] = torch.cuda.max_memory_allocated() - before if on_gpu else 0
        saved = list(Path(work, "out").rglob("*.safetensors"))
        assert saved, "no weights were saved"
        detail += f"; saved {len(saved)} weight files (+{figures['save_extra_bytes'] / 2**20:.0f} MiB while saving)"
    return detail, figures


def cpu_batch_on_cuda_model():
    """A rollout batch built on the CPU (as the rollout phase builds it) through old/reference log-probs, critic
    values and the PTX loss of a CUDA model: the log-probs match the CPU's, the PTX loss has gradients."""
    from ppokit.models.value import ValueModel
    from ppokit.training.forward import batched_logprobs, batched_values
    from ppokit.training.ptx import ptx_nll

    device = needs_cuda()
    tok, model = tiny(device)
    batch = tiny_batch(tok)
    logp = batched_logprobs(model, batch, 2, 64, torch.float32, device)
    on_cpu = batched_logprobs(copy.deepcopy(model).cpu(), batch, 4, 64, torch.float32, "cpu")
    diff = float((logp.cpu() - on_cpu).abs().max())
    assert diff < 1e-3, f"{device} and CPU log-probs differ by {diff}"
    critic = ValueModel(model.model, torch.nn.Linear(model.config.hidden_size, 1).to(device))
    values = batched_values(critic, batch, 2, torch.float32, device)
    nll = ptx_nll(model, [{"_prompt_ids": tok.encode("q: 1+1"), "label": "2"}], tok, 64, torch.float32, device)
    nll.backward()
    assert model.lm_head.weight.grad is not None or model.model.embed_tokens.weight.grad is not None
    return (f"log-probs within {diff:.1e} of the CPU's; values {tuple(values.shape)}; "
            f"PTX NLL {float(nll.detach()):.3f} with gradients"), {"max_abs_diff": diff}


def attention_choice():
    """flash-attention-2 only for bf16/fp16 (float32 -> SDPA); with flash-attn installed, a bf16 actor and its
    reference both use it and agree at step 0."""
    import importlib.util
    import tempfile
    from pathlib import Path

    from ppokit.models import attention_implementation, load_causal_lm, load_reference
    from ppokit.testing import save_tiny_model

    assert attention_implementation(True, torch.float32) == "sdpa", "float32 must not pick flash-attention-2"
    device = needs_cuda()
    if importlib.util.find_spec("flash_attn") is None or device.type != "cuda":
        raise Skip("float32 -> SDPA checked; flash-attn is not installed here (the image has none), so FA2 is not")
    impl = attention_implementation(True, torch.bfloat16)
    assert impl == "flash_attention_2", f"bf16 with flash-attn installed picked {impl}"
    folder = save_tiny_model(Path(tempfile.mkdtemp()) / "m")
    actor = load_causal_lm(folder, device=device, attn_implementation=impl)
    reference = load_reference(actor, folder, device=device)
    assert reference.config._attn_implementation == impl, reference.config._attn_implementation
    ids = torch.randint(10, 200, (2, 12), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
        same = torch.equal(actor(input_ids=ids).logits, reference(input_ids=ids).logits)
    assert same, "actor and reference differ at step 0"
    return "float32 -> SDPA; bf16 -> flash_attention_2 for actor and reference (equal logits)", {}


def two_processes(root):
    """2 processes under torchrun (gloo; NCCL refuses two ranks on one GPU, so no GPU is needed): LOCAL_RANK derived
    from RANK % LOCAL_WORLD_SIZE, never RANK; skip_group keeps the ranks' batch sizes equal."""
    import re
    import subprocess
    import sys

    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join(sys.path))
    out = {}
    for name, script in (("local_rank", "scripts/gpu_check/ranks.py"),
                         ("skip_group", "tests/distributed/skip_group_ranks.py")):
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                               str(root / script)], capture_output=True, text=True, env=env, timeout=300, cwd=root)
        assert done.returncode == 0, f"{name} exited {done.returncode}: {(done.stdout + done.stderr)[-400:]}"
        out[name] = done.stdout
    verdicts = re.findall(r"^local_rank \d+: (\w+)", out["local_rank"], re.M)
    assert verdicts == ["PASS", "PASS"], f"local_rank: {verdicts}"
    sizes = {s for _, s in re.findall(r"^rank (\d+): (\d+) sequences", out["skip_group"], re.M)}
    assert len(sizes) == 1, f"skip_group: batch sizes per rank {sizes}"
    return f"LOCAL_RANK rule on both ranks; both ranks kept {sizes.pop()} sequences", {}


def ppo_steps(model_dir: str, work):
    """2 PPO steps (a critic: its values and update on the device) with flash-attention asked for (SDPA where it is
    not installed or the compute is float32)."""
    needs_cuda()
    s = grpo_session(model_dir, work, rl_algorithm="ppo", max_steps=2, use_flash_attention=True)
    done = [s.step() for _ in range(2)]
    losses = [m.get("critic/value_loss", m.get("critic/loss")) for m in done]
    assert all(v is not None and torch.isfinite(torch.tensor(v)) for v in losses), f"critic losses {losses}"
    return f"critic loss {', '.join(f'{v:.3g}' for v in losses)}", {"critic_loss": losses}


def vllm_steps(model_dir: str, work):
    """2 GRPO steps with the vLLM engine (sleep/wake after each update, weights synced): log-probs agree."""
    import importlib.util

    needs_cuda()
    if importlib.util.find_spec("vllm") is None or not torch.cuda.is_available():
        raise Skip("vLLM is not installed here (the image has none)")
    return grpo_steps(model_dir, work, steps=2, rollout_engine="vllm")
