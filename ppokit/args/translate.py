"""The translation step: renamed keys to their newest names, comment keys dropped, PaddleNLP-only
switches noted, unknown keys refused with the closest valid key. Runs on each input source
(file, command line, overrides) before validation, so attribute names are always the newest."""

from __future__ import annotations

import difflib
from typing import Any

from .arguments import Arguments
from .extensions import VERL_KL_NAMES

RENAMES: dict[str, tuple[str, str]] = {
    "num_return_sequences": ("rollout_n", "PaddleNLP E0-E4 name"),
    "reward_critic_model_name_or_path": ("critic_model_name_or_path", "PaddleNLP E0-E2 name"),
    "reward_critic_tokenizer_alpha": ("critic_tokenizer_alpha", "PaddleNLP E2-E6 name"),
    "label_key": ("response_key", "PaddleNLP E3-E4 name"),
    "mini_batch_size": ("global_mini_batch_size", "PaddleNLP E5 name"),
    "quant_type": ("rollout_quant_type", "PaddleNLP E5 name"),
    "rollout_logprob_batch_size": ("per_device_logprob_batch_size", "PaddleNLP E2b-E4 name"),
    "max_seq_len": ("max_length", "name in PaddleNLP's README, never a PaddleNLP key"),
    "pretrain_critic_steps": ("critic_warmup_steps", "PaddleNLP VAPO-config name"),
}
"""old key -> (new key, where the old name comes from)."""

_KERNELS = "ppokit runs PyTorch/transformers kernels"
_PARALLEL = "ppokit trains data-parallel with DeepSpeed ZeRO (set sharding)"
IGNORED: dict[str, str] = {
    "fused_linear": _KERNELS, "use_fused_linear": _KERNELS, "use_fused_rope": _KERNELS,
    "use_fused_rms_norm": _KERNELS, "use_fused_dropout_add": _KERNELS,
    "use_fused_linear_cross_entropy": _KERNELS,
    "use_fused_head_and_loss_fn": "ppokit computes log-probs in chunks of chunk_size tokens",
    "use_remove_padding": "ppokit masks padding with attention masks",
    "use_attn_mask_start_row_indices": "ppokit masks padding with attention masks",
    "tensor_parallel_output": "logits are never split across ranks in ppokit",
    "skip_profile_timer": "ppokit has no framework timers; step timings are logged as metrics",
    "autotuner_benchmark": "ppokit trains normally; use max_steps for a short run",
    "release_grads": "PyTorch frees gradients with zero_grad(set_to_none=True)",
    "amp_master_grad": "precision follows bf16/fp16 only",
    "amp_custom_black_list": "precision follows bf16/fp16 only",
    "amp_custom_white_list": "precision follows bf16/fp16 only",
    "pipeline_parallel_degree": _PARALLEL, "pipeline_parallel_config": _PARALLEL,
    "virtual_pp_degree": _PARALLEL, "pp_recompute_interval": _PARALLEL,
    "sharding_parallel_degree": "ZeRO shards over all data-parallel ranks",
    "sharding_parallel_config": _PARALLEL, "sequence_parallel": _PARALLEL,
    "no_recompute_layers": "recompute checkpoints every decoder layer",
    "offload_recompute_inputs": "recompute keeps its inputs on the device",
    "unified_checkpoint": "ppokit always saves HF-format checkpoint folders",
    "unified_checkpoint_config": "ppokit always saves HF-format checkpoint folders",
    "eval_mode": "ppokit evaluates with the training actor",
    "stage": "informational label only",
    "use_tgt_len_value": "PaddleNLP compatibility switch without effect",
    "dropout_warmup_steps": "PaddleNLP never used it either",
    "actor_tokenizer_alpha": "tokenisation is deterministic in ppokit",
    "reward_tokenizer_alpha": "tokenisation is deterministic in ppokit",
    "critic_tokenizer_alpha": "tokenisation is deterministic in ppokit",
    "rollout_quant_type": "rollout weights are not quantised in ppokit",
    "balance_batch": "each rank trains on the prompts it generated for (global token counts keep the gradient the same)",
    "use_fp32_compute": "ppokit always computes log-probs, rewards, advantages and losses in float32",
    "early_stopping": "ppokit trains to max_steps (num_train_epochs); stop a run and resume it instead",
    "early_stopping_patience": "ppokit has no early stopping",
    "early_stopping_threshold": "ppokit has no early stopping",
    "recompute_granularity": "transformers checkpoints whole decoder layers",
    "critic_recompute_granularity": "transformers checkpoints whole decoder layers",
    "fp16_opt_level": "precision follows bf16/fp16 alone (O2 is only checked to come with bf16 or fp16)",
    "wandb_http_proxy": "the wandb backend reads the standard HTTPS_PROXY/HTTP_PROXY variables; set those",
}
"""PaddleNLP-only key -> what ppokit does instead. They stay fields (so files load unchanged)."""

NO_EFFECT = "accepted for PaddleNLP compatibility; no effect here"
COMMENT_PREFIXES = ("comment", "_comment", "#", "//")
PARKED_PREFIX = "_"
"""PaddleNLP's parser drops unknown keys; its ppo-4d era files park an alternative value under a leading '_'."""
DROPPED_TYPOS = {"skip_memory_metric": "a misspelling of skip_memory_metrics that PaddleNLP's parser dropped; "
                                       "ppokit has no memory metrics either"}
"""Keys PaddleNLP's parser silently dropped (they are in real files) -> why they are harmless here."""


def known_keys() -> list[str]:
    """Every key a config may contain: fields plus old names."""
    return sorted([*Arguments.model_fields, *RENAMES])


def suggest(key: str) -> str | None:
    """The closest valid key to ``key`` (difflib), or None when nothing is close."""
    match = difflib.get_close_matches(key, known_keys(), n=1, cutoff=0.6)
    return match[0] if match else None


def unknown_key_message(source: str, key: str, prefix: str = "") -> str:
    """'SOURCE: unknown key 'k'; did you mean k2?' as one sentence."""
    what = "option" if prefix else "key"
    hint = suggest(key)
    tail = (f"; did you mean {prefix}{hint}?" if hint
            else "; `python -m ppokit.args list` shows every valid key.")
    return f"{source}: unknown {what} '{prefix}{key}'{tail}"


def translate(raw: dict[str, Any], source: str, prefix: str = "") -> tuple[dict[str, Any], list[str], list[str]]:
    """Rename, drop comments, collect notes; returns (values by newest name, notes, errors)."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    errors: list[str] = []
    parked: list[str] = []
    for key, value in raw.items():
        if not isinstance(key, str):
            errors.append(f"{source}: key {key!r} is not a string.")
            continue
        if key.startswith(COMMENT_PREFIXES):
            notes.append(f"{source}: comment key '{key}' ignored.")
            continue
        if key.startswith(PARKED_PREFIX) or key in DROPPED_TYPOS:
            if key in DROPPED_TYPOS:
                notes.append(f"{source}: '{key}' ignored: {DROPPED_TYPOS[key]}.")
            else:
                parked.append(key)
            continue
        name = key
        if key in RENAMES:
            name, origin = RENAMES[key]
            if name in raw:
                errors.append(f"{source}: both '{key}' and '{name}' are given; '{key}' is the {origin} "
                              f"of '{name}', keep only '{name}'.")
                continue
            if value is None and Arguments.model_fields[name].default is not None:
                notes.append(f"{source}: '{key}' ({origin} of '{name}') is null; using the default.")
                continue
            notes.append(f"{source}: '{key}' is the {origin} of '{name}'; read as {name}={value!r}.")
        if name not in Arguments.model_fields:
            errors.append(unknown_key_message(source, key, prefix))
            continue
        out[name] = _translate_value(name, value, source, notes)
    if parked:
        notes.append(f"{source}: keys starting with '_' are read as comments (PaddleNLP's parser dropped them): "
                     + ", ".join(parked) + ".")
    return out, notes, errors


def _translate_value(name: str, value: Any, source: str, notes: list[str]) -> Any:
    if name in ("kl_loss_type", "kl_penalty") and value in VERL_KL_NAMES:
        notes.append(f"{source}: {name}='{value}' is verl's name of estimator '{VERL_KL_NAMES[value]}'.")
        return VERL_KL_NAMES[value]
    if name == "device" and isinstance(value, str) and value.startswith("gpu"):
        notes.append(f"{source}: device='{value}' (PaddleNLP spelling) read as 'cuda{value[3:]}'.")
    return value


def ignored_notes(values: dict[str, Any]) -> list[str]:
    """Notes for PaddleNLP-only keys present in the (validated) input: one per key whose value asks for
    something ppokit will not do, one summary line for the rest."""
    notes: list[str] = []
    quiet: list[str] = []
    for key in sorted(set(values) & set(IGNORED)):
        if _is_quiet(key, values):
            quiet.append(key)
        else:
            notes.append(f"{key}={values[key]!r}: {NO_EFFECT}, because {IGNORED[key]}.")
    if quiet:
        notes.append(f"{NO_EFFECT[0].upper()}{NO_EFFECT[1:]}: " + ", ".join(quiet) + ".")
    return notes


_HARMLESS = frozenset({"tensor_parallel_output", "skip_profile_timer", "release_grads", "stage",
                       "unified_checkpoint", "unified_checkpoint_config"})


def _is_quiet(key: str, values: dict[str, Any]) -> bool:
    """True when the value asks for nothing a user would miss (default, degree <= 1, harmless switch)."""
    value = values[key]
    default = Arguments.model_fields[key].get_default(call_default_factory=True)
    if key in _HARMLESS or value == default or (value in ("", None, []) and default in ("", None, [])):
        return True
    if key.endswith("_degree") or key == "pp_recompute_interval":
        return isinstance(value, int) and value <= 1
    return key == "pipeline_parallel_config" and values.get("pipeline_parallel_degree", -1) <= 1
