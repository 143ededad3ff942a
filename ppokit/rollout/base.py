"""The rollout interface shared by the hf and vLLM engines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class SamplingParams:
    """How to sample responses (PaddleNLP keys in brackets).

    n [rollout_n] responses per prompt; max_new_tokens [max_dec_len]; min_new_tokens [min_dec_len]
    (EOS is suppressed before that many tokens); temperature; top_p; top_k (0 = off);
    repetition_penalty (1.0 = off); do_sample defaults to `temperature > 0` (temperature 0 means
    greedy); seed: a per-call seed for reproducible sampling (None = the global torch RNG).
    """

    n: int = 1
    max_new_tokens: int = 512
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    do_sample: bool | None = None
    seed: int | None = None

    def __post_init__(self):
        if self.do_sample is None:
            self.do_sample = self.temperature > 0
        problems = []
        if self.n < 1:
            problems.append(f"n (rollout_n) must be >= 1, got {self.n}")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens (max_dec_len) must be >= 1, got {self.max_new_tokens}")
        if not 0 <= self.min_new_tokens <= self.max_new_tokens:
            problems.append(
                f"min_new_tokens (min_dec_len) must be between 0 and max_new_tokens ({self.max_new_tokens}), "
                f"got {self.min_new_tokens}"
            )
        if self.temperature < 0 or (self.do_sample and self.temperature == 0):
            problems.append(f"temperature must be > 0 when sampling (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            problems.append(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            problems.append(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty must be > 0 (1.0 = off), got {self.repetition_penalty}")
        if problems:
            raise ValueError("Invalid sampling parameters: " + "; ".join(problems) + ".")


@dataclass
class RolloutOutput:
    """Responses of one `generate` call.

    Row j answers prompt `prompt_index[j]`; the n responses of prompt i are contiguous, in prompt
    order. `response_ids[j]` has no padding and ends with the EOS token when the response stopped
    (`finish_reasons[j] == "stop"`); a response cut at max_new_tokens has finish reason "length".
    `logprobs[j][t]` is the sampler's log-prob of token t when the engine provides it, else None.
    Multi-turn (`ppokit.rollout.agent_loop`): a response holds the model's turns and the tool results
    between them; `loss_mask[j][t]` is 1 on the model's tokens and 0 on tool results (None: all the
    model's), `turns[j]` its segments in order ({"role": "assistant"|"tool", "text", "start", "end",
    "calls": [...]}, token offsets into response_ids[j]).

    What the one rollout (`ppokit.rollout.agent_loop.rollout`) adds for scoring, so that nothing after it asks
    whether a row was single- or multi-turn: `answers[j]` the final answer (the last model turn, special tokens
    dropped), `score_fields[j]` extra fields reward functions may name (a multi-turn row's `conversation`),
    `rollout_rewards` name -> per-row reward terms the rollout itself earned (the tools' step rewards) and
    `stats` the rollout's own metrics (tools/*, turns/*). Engines leave them empty.
    """

    prompt_index: list[int]
    response_ids: list[list[int]]
    finish_reasons: list[str]
    logprobs: list[list[float]] | None = None
    loss_mask: list[list[int]] | None = None
    turns: list[list[dict]] | None = None
    answers: list[str] | None = None
    score_fields: list[dict] | None = None
    rollout_rewards: dict[str, list[float]] = field(default_factory=dict)
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def num_truncated(self) -> int:
        """How many responses hit max_new_tokens without EOS."""
        return sum(reason == "length" for reason in self.finish_reasons)

    def __len__(self) -> int:
        return len(self.response_ids)


class RolloutEngine(Protocol):
    def generate(self, prompt_token_ids: list[list[int]], sampling: SamplingParams) -> RolloutOutput:
        """Sample `sampling.n` responses for each prompt (token ids, no padding)."""
        ...

    def update_weights(self, model) -> None:
        """Make the engine generate with `model`'s current weights (call after each update)."""
        ...


def check_prompts(prompt_token_ids: list[list[int]]) -> None:
    """Raise a clear error for an empty batch or an empty prompt."""
    if not prompt_token_ids:
        raise ValueError("generate() got no prompts; the prompt batch is empty.")
    empty = [i for i, p in enumerate(prompt_token_ids) if len(p) == 0]
    if empty:
        raise ValueError(f"Prompts {empty[:10]} are empty (no tokens); every prompt needs at least one token.")
