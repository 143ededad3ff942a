"""The rollout interface shared by the hf and vLLM engines."""

from __future__ import annotations

import threading
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
    `token_switches[j][t]`: how many times the weights changed under the generation before token t was sampled
    (partial_rollout: switch; 0 = the weights it started with), None when the engine did not switch weights.
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
    token_switches: list[list[int]] | None = None

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


class WeightSwitch:
    """New weights for a generation in flight (`partial_rollout`, docs/async.md), between two of its tokens.

    The trainer's thread calls `offer(model)` with the trained weights; the producer's decoding loop calls
    `poll(t, rows_done)` before it computes the logits of token t. `apply(model)` (set by the engine) copies
    the weights into the engine's own copy. mode "finish": the loop never takes them; `offer` waits for the
    generation to end, then applies them, and `rows_on_old` counts the rows that finished on the old weights
    after the new ones were offered. mode "switch": the loop takes them between two tokens —
    - at_token None: at the first poll after the offer, so the first token on the new weights depends on how
      fast the update ran against the generation (timing);
    - at_token s: the loop waits at token s of each decoding batch until the offer (or `release`: no weights
      come for this generation), so tokens < s are always from the old weights and tokens >= s from the new
      ones, every run alike (the generation then overlaps the update only with its first s tokens).
    At most one switch per generation (the threaded schedule overlaps one update with one batch); `offer`
    returns once the weights are in the engine, and never changes them under a running generation otherwise.
    """

    def __init__(self, mode: str = "finish", at_token: int | None = None):
        if mode not in ("finish", "switch"):
            raise ValueError(f"partial_rollout must be finish or switch, got {mode!r}")
        if at_token is not None and at_token < 1:
            raise ValueError(f"partial_rollout_token must be >= 1 (token 0 comes from the prefill), got {at_token}")
        self.mode, self.at_token = mode, at_token
        self.apply = None  # the engine's weight copy: apply(model)
        self._cond = threading.Condition()
        self._pending = None  # the model whose weights the generation in flight is offered
        self._running = self._released = False
        self._done_at_offer = 0
        self.switches = 0  # weight switches in the current generation
        self.rows_done = 0  # rows of the current generation finished so far, over all its generate calls (model
        # turns in a multi-turn rollout); the engine reports them
        self.rows_on_old = 0  # rows it finished on the old weights after new ones were offered (0 with at_token:
        # there the new weights count as ready at token s, and every row still running then switches)

    def begin(self) -> None:
        """A generation starts (the pipeline calls it before handing the producer its work)."""
        with self._cond:
            self._running, self._released, self._pending = True, False, None
            self.switches = self.rows_done = self.rows_on_old = 0

    def end(self) -> None:
        """The generation is over: an offer still waiting applies its weights now."""
        with self._cond:
            if self._pending is not None and self.at_token is None:  # (at_token: weights count as ready at s)
                self.rows_on_old = self.rows_done - self._done_at_offer
            self._running = False
            self._cond.notify_all()

    def release(self) -> None:
        """No weights will be offered to the generation in flight (a step without a weight sync): a loop waiting
        at `at_token` goes on with the weights it has."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def poll(self, t: int, rows_done: int) -> bool:
        """Before the logits of token t, with `rows_done` rows of the generation finished: True when the weights
        were just switched (mode switch; at token `at_token` it first waits for them)."""
        with self._cond:
            if not self._running:  # a generation the pipeline did not start (inline, evaluation): nothing overlaps
                return False
            self.rows_done = rows_done
            if self.mode != "switch" or self.switches:
                return False
            if self.at_token is not None:
                if t != self.at_token:
                    return False
                while self._pending is None and not self._released:
                    if not self._cond.wait(1.0) and not threading.main_thread().is_alive():
                        return False  # the trainer is gone (interpreter exit): no weights will come
            if self._pending is None:
                return False
            self.apply(self._pending)
            self._pending = None
            self.switches += 1
            self._cond.notify_all()
            return True

    def offer(self, model) -> None:
        """The trainer's new weights: into the generation in flight (switch), or into the engine once no
        generation runs (finish, or none in flight)."""
        with self._cond:
            if self._running and not self.switches:
                self._pending, self._done_at_offer = model, self.rows_done
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._pending is not model or not self._running)
                if self._pending is not model:
                    return  # taken between two tokens
                self._pending = None
            self._cond.wait_for(lambda: not self._running)
            self.apply(model)


def check_prompts(prompt_token_ids: list[list[int]]) -> None:
    """Raise a clear error for an empty batch or an empty prompt."""
    if not prompt_token_ids:
        raise ValueError("generate() got no prompts; the prompt batch is empty.")
    empty = [i for i, p in enumerate(prompt_token_ids) if len(p) == 0]
    if empty:
        raise ValueError(f"Prompts {empty[:10]} are empty (no tokens); every prompt needs at least one token.")
