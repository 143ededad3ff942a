"""Rollouts with transformers' `generate` (works everywhere; the fast path is vLLM).

Precision: with `dtype` (e.g. bfloat16) the engine generates with its own copy of the model in
that dtype, refreshed by `update_weights`; measured on the 2-core CPU with SmolLM2-135M (8 prompts
x 8 samples x 64 new tokens) a bf16 copy took ~14 s, autocast-bf16 on the float32 weights ~17 s,
float32 23-41 s. With `dtype=None` it generates with the live model itself and `update_weights`
has nothing to do.
"""

from __future__ import annotations

import contextlib

import torch

from ppokit.models.weights import load_hf_state, plain_copy
from ppokit.rollout.base import RolloutOutput, SamplingParams, check_prompts


class HFRolloutEngine:
    """`RolloutEngine` over `model.generate` on left-padded prompt batches."""

    def __init__(self, model, tokenizer, batch_size: int | None = None, dtype: torch.dtype | None = None):
        if tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; load it with ppokit.models.load_tokenizer.")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size (prompts per generate call) must be >= 1 or None, got {batch_size}.")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.dtype = dtype
        self.eos_ids = eos_token_ids(model, tokenizer)
        param_dtype = next(model.parameters()).dtype
        # A plain copy (LoRA merged, ZeRO-3 gathered, no DeepSpeed hooks) in the generation dtype.
        self._copy = plain_copy(model, dtype).eval() if dtype is not None and dtype != param_dtype else None

    @property
    def generation_model(self):
        """The module `generate` runs on: the low-precision copy, or the live model."""
        return self._copy if self._copy is not None else self.model

    def update_weights(self, model) -> None:
        """Use `model`'s current weights (the unwrapped trained module) for the next rollouts."""
        if self._copy is None:
            self.model = model
            return
        load_hf_state(self._copy, model)

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> RolloutOutput:
        check_prompts(prompt_token_ids)
        model = self.generation_model
        was_training = model.training
        step = self.batch_size or len(prompt_token_ids)
        rows: list[list[int]] = []
        reasons: list[str] = []
        rng = torch.random.fork_rng(devices=_rng_devices(model)) if sampling.seed is not None else contextlib.nullcontext()
        model.eval()
        try:
            # no_grad, not inference_mode: a model that updates buffers in forward (dynamic RoPE)
            # would otherwise keep inference tensors that training cannot back-propagate through.
            with rng, torch.no_grad():
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                for start in range(0, len(prompt_token_ids), step):
                    new_tokens = self._generate_batch(model, prompt_token_ids[start : start + step], sampling)
                    for row in new_tokens.tolist():
                        ids, reason = self._cut(row)
                        rows.append(ids)
                        reasons.append(reason)
        finally:
            model.train(was_training)
        index = [i for i in range(len(prompt_token_ids)) for _ in range(sampling.n)]
        return RolloutOutput(prompt_index=index, response_ids=rows, finish_reasons=reasons, logprobs=None)

    def _generate_batch(self, model, prompts: list[list[int]], sampling: SamplingParams) -> torch.Tensor:
        device = next(model.parameters()).device
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=self._generation_config(sampling),
        )
        new_tokens = out[:, width:].cpu()
        # Greedy decoding gives every sample the same answer; transformers refuses n > 1 for it.
        return new_tokens if sampling.do_sample else new_tokens.repeat_interleave(sampling.n, dim=0)

    def _generation_config(self, sampling: SamplingParams):
        from transformers import GenerationConfig

        kwargs = dict(
            max_new_tokens=sampling.max_new_tokens,
            min_new_tokens=sampling.min_new_tokens or None,
            num_return_sequences=sampling.n if sampling.do_sample else 1,
            do_sample=sampling.do_sample,
            repetition_penalty=sampling.repetition_penalty,
            eos_token_id=self.eos_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            bos_token_id=None,
            use_cache=True,
        )
        if sampling.do_sample:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        return GenerationConfig(**kwargs)

    def _cut(self, row: list[int]) -> tuple[list[int], str]:
        """Strip what follows the first EOS (padding); no EOS means the response hit max_new_tokens."""
        stops = set(self.eos_ids)
        for t, token in enumerate(row):
            if token in stops:
                return row[: t + 1], "stop"
        return row, "length"


def eos_token_ids(model, tokenizer) -> list[int]:
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos:
        ids.update(int(i) for i in config_eos)
    if not ids:
        raise ValueError("Neither the tokenizer nor the model's generation_config names an EOS token.")
    return sorted(ids)


def _rng_devices(model) -> list:
    device = next(model.parameters()).device
    return [device] if device.type == "cuda" else []
