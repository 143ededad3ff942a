import json
import logging

import pytest
import torch

from ppokit.engine import deepspeed_config, zero_settings


@pytest.mark.parametrize(
    "sharding, offload_level, expected",
    [
        ("", "", (0, False)),
        (None, "", (0, False)),
        ("stage1", "", (1, False)),
        ("stage2", "freeze_model train_model", (2, False)),
        ("stage3", "optimizer", (3, True)),
        ("stage1 offload", "", (1, True)),
        (["stage2"], "", (2, False)),
        (["stage1", "offload"], "", (1, True)),
    ],
)
def test_paddlenlp_sharding_maps_to_zero(sharding, offload_level, expected):
    assert zero_settings(sharding, offload_level) == expected


def test_unknown_sharding_is_explained():
    with pytest.raises(ValueError, match="'stage1', 'stage2' or 'stage3'"):
        zero_settings("stage4")


def _config(**kw):
    base = dict(zero_stage=2, offload_optimizer=False, micro_batch_size=2, grad_accum=4, world_size=2, lr=1e-6,
                betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01, max_grad_norm=1.0, fp16=False, device="cpu")
    base.update(kw)
    return deepspeed_config(**base)


def test_config_carries_paddlenlp_optimizer_keys_and_is_logged(caplog):
    with caplog.at_level(logging.DEBUG, logger="ppokit"):
        cfg = _config()
    assert cfg["train_batch_size"] == 16 and cfg["train_micro_batch_size_per_gpu"] == 2
    assert cfg["gradient_accumulation_steps"] == 4 and cfg["gradient_clipping"] == 1.0
    assert cfg["optimizer"] == {"type": "AdamW", "params": {"lr": 1e-6, "betas": [0.9, 0.95], "eps": 1e-8,
                                                            "weight_decay": 0.01, "torch_adam": True, "fused": True}}
    assert cfg["zero_optimization"] == {"stage": 2}
    assert "bf16" not in cfg and "fp16" not in cfg and "torch_autocast" not in cfg  # float32 compute
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("DeepSpeed config: ")]
    assert json.loads(logged[-1][len("DeepSpeed config: "):]) == cfg


def test_offload_only_on_cuda_and_with_zero():
    assert "offload_optimizer" not in _config(offload_optimizer=True)["zero_optimization"]
    gpu = _config(offload_optimizer=True, zero_stage=0, device="cuda")
    assert gpu["zero_optimization"] == {"stage": 1, "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    assert "torch_adam" not in gpu["optimizer"]["params"]  # DeepSpeed's CPU Adam for offload


def test_fp16_uses_deepspeed_loss_scaling_on_cuda_only():
    assert _config(fp16=True, compute_dtype=torch.float16, device="cuda")["fp16"]["enabled"] is True
    assert "fp16" not in _config(fp16=True, compute_dtype=torch.bfloat16, device="cpu")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_bf16_compute_is_deepspeeds_torch_autocast_section_on_every_device(device):
    """bf16 forwards over float32 weights: DeepSpeed's torch_autocast section, the same on a CPU and on CUDA; its
    gradients and ZeRO-3 shards stay float32 (no lower-precision modules); no bf16 weights (no bf16 section)."""
    cfg = _config(compute_dtype=torch.bfloat16, device=device)
    assert cfg["torch_autocast"] == {"enabled": True, "dtype": "bfloat16", "lower_precision_safe_modules": []}
    assert "bf16" not in cfg and "fp16" not in cfg


def test_no_clipping_and_bad_stage():
    assert _config(max_grad_norm=0)["gradient_clipping"] == 0.0
    with pytest.raises(ValueError, match="ZeRO stage"):
        _config(zero_stage=4)
