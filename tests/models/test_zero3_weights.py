"""ZeRO-3 without a full model on any GPU (issue #30, fault 7), shown with DeepSpeed's CPU accelerator (one process).

Loading: a model for a ZeRO-3 engine is built partitioned (`zero.Init` through transformers) and the checkpoint is
loaded into its shards. Saving: the weights are gathered one module at a time, never all at once.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from ppokit.engine import build_engine, deepspeed_config, init_distributed
from ppokit.models import load_causal_lm
from ppokit.models.folders import hf_state_dict, save_hf, tied_names
from ppokit.models.weights import gathered, hf_state
from ppokit.testing import tiny_tokenizer


@pytest.fixture(scope="module")
def dist():
    return init_distributed()


def zero3(stage: int = 3) -> dict:
    return deepspeed_config(zero_stage=stage, offload_optimizer=False, micro_batch_size=2, grad_accum=1, world_size=1,
                            lr=1e-3, device="cpu")


def inputs():
    ids = torch.randint(10, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)


def test_a_zero3_model_is_loaded_partitioned_with_the_checkpoints_weights(dist, tiny_model_dir):
    from transformers.integrations import is_deepspeed_zero3_enabled

    model = load_causal_lm(tiny_model_dir, zero3_config=zero3())
    params = list(model.parameters())
    assert params and all(hasattr(p, "ds_id") for p in params)  # partitioned as they were created
    assert all(p.numel() == 0 for p in params)  # nothing but the shard (p.ds_tensor) is held
    assert not is_deepspeed_zero3_enabled()  # models loaded afterwards (the reference) are ordinary
    assert not hasattr(next(load_causal_lm(tiny_model_dir).parameters()), "ds_id")
    saved = load_file(f"{tiny_model_dir}/model.safetensors")
    with gathered(model):
        for name, p in model.named_parameters():
            torch.testing.assert_close(p.detach(), saved[name], rtol=0, atol=0)  # the checkpoint, not a random init
    engine = build_engine(model, zero3())
    plain = load_causal_lm(tiny_model_dir).eval()
    engine.module.eval()
    with torch.no_grad():
        torch.testing.assert_close(engine(**inputs()).logits, plain(**inputs()).logits)


def test_zero3_saving_gathers_one_module_at_a_time(dist, tiny_model_dir, tmp_path, monkeypatch):
    import deepspeed

    engine = build_engine(load_causal_lm(tiny_model_dir, zero3_config=zero3()), zero3())
    total = len(list(engine.module.parameters()))
    sizes = []
    real = deepspeed.zero.GatheredParameters

    def recording(params, *args, **kwargs):
        sizes.append(len(params) if isinstance(params, (list, tuple)) else 1)
        return real(params, *args, **kwargs)

    monkeypatch.setattr(deepspeed.zero, "GatheredParameters", recording)
    save_hf(engine.module, tiny_tokenizer(), tmp_path / "out")
    assert sizes and max(sizes) <= 2 < total  # a linear's weight (and bias), never the model
    monkeypatch.setattr(deepspeed.zero, "GatheredParameters", real)
    reloaded = load_causal_lm(str(tmp_path / "out"))
    saved = load_file(f"{tiny_model_dir}/model.safetensors")
    for name, p in reloaded.named_parameters():
        torch.testing.assert_close(p.detach(), saved[name], rtol=0, atol=0)


def test_the_module_by_module_state_equals_the_state_dict_with_ties_kept(tiny_model_dir):
    from ppokit.models import LoraSpec

    for model in (load_causal_lm(tiny_model_dir), load_causal_lm(tiny_model_dir, lora=LoraSpec(rank=2))):
        ours, theirs = hf_state_dict(model), dict(hf_state(model))
        assert ours.keys() == theirs.keys()
        for name in ours:
            torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=0)
        ties = tied_names(model.get_base_model() if hasattr(model, "peft_config") else model)
        assert ties == {"lm_head.weight": "model.embed_tokens.weight"}  # the tiny models tie their embeddings
        assert all(ours[name] is ours[first] for name, first in ties.items())


def test_zero3_loading_saved_weights_gathers_one_module_at_a_time(dist, tiny_model_dir, tmp_path, monkeypatch):
    """A weights-only resume (`load_weights`) into a ZeRO-3 actor writes module by module."""
    import deepspeed

    from ppokit.models.folders import load_weights
    from ppokit.testing import save_tiny_model

    other = save_tiny_model(tmp_path / "other", seed=7)
    engine = build_engine(load_causal_lm(tiny_model_dir, zero3_config=zero3()), zero3())
    sizes = []
    real = deepspeed.zero.GatheredParameters

    def recording(params, *args, **kwargs):
        sizes.append(len(params) if isinstance(params, (list, tuple)) else 1)
        return real(params, *args, **kwargs)

    monkeypatch.setattr(deepspeed.zero, "GatheredParameters", recording)
    load_weights(engine.module, tmp_path / "other")
    assert sizes and max(sizes) <= 2
    monkeypatch.setattr(deepspeed.zero, "GatheredParameters", real)
    saved = load_file(f"{other}/model.safetensors")
    with gathered(engine.module):
        for name, p in engine.module.named_parameters():
            torch.testing.assert_close(p.detach(), saved[name], rtol=0, atol=0)
