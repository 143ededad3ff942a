"""Rollouts on the live transformers model (works everywhere; the multi-GPU fast path is vLLM).

Llama/Qwen2/Mistral-family models without repetition penalty go
through ppokit's own decoding loop (`ppokit.rollout.decode`: shared prefill, preallocated cache, exact
one-uniform sampling, finished rows dropped); anything else through `model.generate`
(`fast_decode=False` forces that path).

Precision: `dtype` (e.g. bfloat16) is the generation compute dtype. By default the live model
generates under `torch.autocast(dtype)` and `update_weights` has nothing to do. Measured on this
2-core CPU, SmolLM2-135M, 8 prompts x 8 samples x 64 new tokens (2 threads, idle machine): float32
21.3 s, a bf16 copy of the weights 16.1 s, autocast-bf16 13.8 s (32 tokens, best of 2: 13.0 /
11.4 / 7.8 s; 1 thread, best of 3: 17.9 / 18.8 / 11.4 s) — pure-bf16 elementwise ops are slow on CPU,
autocast keeps them in float32 and caches the bf16 weight casts for the whole generate call.
With `copy_weights` the engine instead generates with its own plain copy of the model in `dtype`
(LoRA merged, ZeRO-3 gathered), refreshed by `update_weights`: meant for ZeRO-3 partitioned
actors, which would otherwise gather every layer at every decoding step.

Partial rollouts (`partial_rollout: switch` with the threaded producer, docs/async.md): with a `WeightSwitch`
attached the decoding loop asks it between tokens whether new weights are ready; if so they are copied into the
engine's own copy in place and generation continues (the keys/values of the earlier tokens kept), and each
response records per token how many switches preceded it (`RolloutOutput.token_switches`). The log-probs the
loop returns are those of the weights that sampled each token. `model.generate` (repetition penalty, other model
families) cannot switch: its rows finish on the weights they started with.
"""

from __future__ import annotations

import contextlib

import torch

from ppokit.models.loading import autocast_context
from ppokit.models.weights import load_hf_state, plain_copy
from ppokit.rollout.base import RolloutOutput, SamplingParams, WeightSwitch, check_prompts
from ppokit.rollout.decode import decode, supports_fast_decode
from ppokit.rollout.token_logprobs import SampledTokenLogprobs


def no_autograd(model):
    """`torch.inference_mode()` for generating with `model` (no version counters or view tracking: +5 % generated
    tokens/s on the bench's rollouts, the same bits; docs/performance.md, eleventh pass), or `torch.no_grad()` where
    the model writes buffers during its forward (dynamic and long RoPE recompute `inv_freq`): an inference tensor kept
    in a buffer could not be changed in place by training's forwards later."""
    for module in model.modules():
        rope = getattr(module, "rope_type", None)
        kinds = rope.values() if isinstance(rope, dict) else [rope]
        if any(isinstance(k, str) and ("dynamic" in k or k == "longrope") for k in kinds):
            return torch.no_grad()
    return torch.inference_mode()


class HFRolloutEngine:
    """`RolloutEngine` over `model.generate` on left-padded prompt batches."""

    def __init__(
        self,
        model,
        tokenizer,
        batch_size: int | None = None,
        dtype: torch.dtype | None = None,
        copy_weights: bool = False,
        return_logprobs: bool = False,
        fast_decode: bool = True,
    ):
        if tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token; load it with ppokit.models.load_tokenizer.")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size (prompts per generate call) must be >= 1 or None, got {batch_size}.")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.dtype = dtype
        self.return_logprobs = return_logprobs  # the sampled tokens' log-probs (SampledTokenLogprobs)
        self.fast_decode = fast_decode
        self.eos_ids = eos_token_ids(model, tokenizer)
        copy_dtype = dtype or next(model.parameters()).dtype
        self._copy = plain_copy(model, copy_dtype).eval() if copy_weights else None
        self.weight_switch: WeightSwitch | None = None

    @property
    def generation_model(self):
        """The module `generate` runs on: the plain copy (copy_weights), or the live model."""
        return self._copy if self._copy is not None else self.model

    def use_own_copy(self) -> None:
        """Generate on a plain copy of the current weights from now on (an asynchronous producer generates while
        the trainer changes the live model); `update_weights` copies new weights into it."""
        if self._copy is None:
            # In the live weights' dtype, generating under the same autocast(dtype): the copy computes what the live
            # model would, so a threaded producer samples the inline producer's tokens. A copy in `dtype` itself
            # (pure bf16 over float32 weights) rounds differently and the two schedules part at the first batch.
            with torch.random.fork_rng(devices=_rng_devices(self.model)):  # the copy's throwaway init draws none
                self._copy = plain_copy(self.model, next(self.model.parameters()).dtype).eval()
            # autocast keeps its bf16 casts for the whole generate call only of leaves that require grad: a frozen
            # copy had every weight cast again at every decoding step (≈ 1.7x the rollout; docs/performance.md).
            # Generation runs under no_grad, so nothing builds a graph.
            self._copy.requires_grad_(True)

    def update_weights(self, model) -> None:
        """Use `model`'s current weights (the unwrapped trained module) for the next rollouts."""
        if self._copy is None:
            self.model = model
            return
        load_hf_state(self._copy, model)
        torch.clear_autocast_cache()  # casts of the old weights cached by an autocast still open (a switch)

    @property
    def _switching(self) -> bool:
        return self.weight_switch is not None and self.weight_switch.mode == "switch"

    def attach_switch(self, switch: WeightSwitch) -> None:
        """Take new weights between tokens through `switch` (partial rollouts); generates on its own copy."""
        self.use_own_copy()
        switch.apply = self.update_weights
        self.weight_switch = switch

    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> RolloutOutput:
        check_prompts(prompt_token_ids)
        model = self.generation_model
        was_training = model.training
        step = self.batch_size or len(prompt_token_ids)
        rows: list[list[int]] = []
        reasons: list[str] = []
        logprobs: list[list[float]] = []
        switched: list[list[int]] = []
        start_switches = 0 if self.weight_switch is None else self.weight_switch.switches
        rows_base = 0 if self.weight_switch is None else self.weight_switch.rows_done  # earlier generate calls
        rng = torch.random.fork_rng(devices=_rng_devices(model)) if sampling.seed is not None else contextlib.nullcontext()
        model.eval()
        try:
            with rng, no_autograd(model), autocast_context(self.dtype or torch.float32, _device(model)):
                if sampling.seed is not None:
                    torch.manual_seed(sampling.seed)
                for start in range(0, len(prompt_token_ids), step):
                    new_tokens, new_logprobs, switches = self._generate_batch(
                        model, prompt_token_ids[start : start + step], sampling, rows_base + len(rows))
                    for j, (row, row_logprobs) in enumerate(zip(new_tokens.tolist(), new_logprobs.tolist())):
                        ids, reason = self._cut(row)
                        rows.append(ids)
                        reasons.append(reason)
                        logprobs.append(row_logprobs[: len(ids)])
                        if switches is not None:
                            switched.append((switches[j, : len(ids)] - start_switches).tolist())
                    if self.weight_switch is not None:
                        self.weight_switch.poll(0, rows_base + len(rows))  # rows finished so far
        finally:
            model.train(was_training)
        index = [i for i in range(len(prompt_token_ids)) for _ in range(sampling.n)]
        return RolloutOutput(prompt_index=index, response_ids=rows, finish_reasons=reasons,
                             logprobs=logprobs if self.return_logprobs else None,
                             token_switches=switched if self._switching else None)

    def _generate_batch(self, model, prompts: list[list[int]], sampling: SamplingParams, rows_before: int = 0):
        """(new tokens, their log-probs (zeros unless return_logprobs), weight switches before each token (None
        without a `weight_switch`)), each (rows, T), n rows per prompt. `rows_before`: rows of this generation
        already finished (what the switch counts)."""
        switch = self.weight_switch
        if self.fast_decode and sampling.repetition_penalty == 1.0 and supports_fast_decode(model):
            hook = None if switch is None else (lambda t, done: switch.poll(t, rows_before + done))
            before = 0 if switch is None else switch.switches  # the loop counts its own switches from 0
            result = decode(
                model, prompts, sampling.n, sampling.max_new_tokens, self.eos_ids, self.tokenizer.pad_token_id,
                do_sample=sampling.do_sample, temperature=sampling.temperature, top_k=sampling.top_k,
                top_p=sampling.top_p, min_new_tokens=sampling.min_new_tokens, return_logprobs=True,
                between_tokens=hook,
            )  # the log-probs cost one log-softmax per step; kept only when asked for
            tokens, logprobs = result[0].cpu(), result[1]
            switches = result[2].cpu() + before if hook is not None else None
            return (tokens, logprobs.cpu() if self.return_logprobs else torch.zeros(tokens.shape, device=tokens.device),
                    switches)
        tokens, logprobs = self._generate_with_transformers(model, prompts, sampling)
        switches = None if switch is None else torch.full(tokens.shape, switch.switches, dtype=torch.long,
                                                          device=tokens.device)
        return tokens, logprobs, switches

    def _generate_with_transformers(self, model, prompts: list[list[int]], sampling: SamplingParams):
        """`model.generate`: (new tokens, their log-probs (zeros unless return_logprobs)), both (rows, T)."""
        device = _device(model)
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        recorder = SampledTokenLogprobs(sampling.temperature if sampling.do_sample else 1.0)
        out = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=self._generation_config(sampling),
            logits_processor=[recorder] if self.return_logprobs else None,
        )
        new_tokens = out[:, width:].cpu()
        logprobs = recorder.finish(new_tokens) if self.return_logprobs else torch.zeros(new_tokens.shape, device=new_tokens.device)
        if sampling.do_sample:
            return new_tokens, logprobs
        # Greedy decoding gives every sample the same answer; transformers refuses n > 1 for it.
        return new_tokens.repeat_interleave(sampling.n, dim=0), logprobs.repeat_interleave(sampling.n, dim=0)

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


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _rng_devices(model) -> list:
    device = _device(model)
    return [device] if device.type == "cuda" else []
