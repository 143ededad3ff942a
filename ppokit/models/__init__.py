"""Model loading (HF folder, .gguf, alias), the reference policy, the critic and reward models.

May import: torch, transformers, peft, safetensors, and `ppokit.engine` (rank helpers).
"""

from ppokit.models.loading import (
    ALIASES,
    LoraSpec,
    ModelNotFoundError,
    apply_lora,
    attention_implementation,
    autocast_context,
    cache_root,
    convert_gguf,
    dtype_for,
    enable_recompute,
    is_recomputing,
    load_causal_lm,
    load_tokenizer,
    resolve_model_path,
)
from ppokit.models.reference import AdapterDisabledReference, ReferencePolicy, freeze, load_reference
from ppokit.models.reward_model import load_reward_model, score_texts
from ppokit.models.value import ValueModel, load_value_model, load_value_state, save_value_model
from ppokit.models.weights import gathered, hf_state, load_hf_state, plain_copy

__all__ = [
    "ALIASES",
    "AdapterDisabledReference",
    "LoraSpec",
    "ModelNotFoundError",
    "ReferencePolicy",
    "ValueModel",
    "apply_lora",
    "attention_implementation",
    "autocast_context",
    "cache_root",
    "convert_gguf",
    "dtype_for",
    "enable_recompute",
    "freeze",
    "gathered",
    "hf_state",
    "is_recomputing",
    "load_causal_lm",
    "load_hf_state",
    "load_reference",
    "load_reward_model",
    "load_tokenizer",
    "load_value_model",
    "load_value_state",
    "plain_copy",
    "resolve_model_path",
    "save_value_model",
    "score_texts",
]
