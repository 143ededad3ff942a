"""Fixtures of the PPO tests: prompts, PTX records and a tiny reward model built in code."""

import json

import pytest
import torch

from ppokit.testing import tiny_model_config, tiny_tokenizer


@pytest.fixture()
def prompts_file(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(16)))
    return str(path)


@pytest.fixture()
def ptx_file(tmp_path):
    """Supervised src/tgt records: the last tgt turn is the PTX target."""
    path = tmp_path / "ptx.jsonl"
    rows = [{"src": f"spell {w}", "tgt": w} for w in ("cat", "dog", "bird", "fish", "cow", "pig", "owl", "bee")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="session")
def letter_rm_dir(tmp_path_factory):
    """A tiny Llama sequence classifier (num_labels=1) that scores 1.0 a text ending in 'a'.

    Attention and MLP outputs are zeroed, so the last hidden state is the final RMSNorm of the last
    token's embedding; the score head is that vector for 'a' divided by its squared length: a text
    ending in 'a' scores exactly 1, any other last token about 0 (|cos| of random vectors).
    """
    from transformers import AutoModelForSequenceClassification

    path = tmp_path_factory.mktemp("letter-rm")
    tokenizer = tiny_tokenizer()
    config = tiny_model_config(tokenizer)
    config.num_labels = 1
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        hidden_a = model.model.norm(model.model.embed_tokens.weight[tokenizer.convert_tokens_to_ids("a")])
        model.score.weight.copy_((hidden_a / hidden_a.square().sum())[None, :])
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
