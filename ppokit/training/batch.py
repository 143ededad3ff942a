"""The rollout batch: prompts, responses and everything computed about them, as aligned tensors.

Layout (verl's): `input_ids` is the left-padded prompt (P columns) followed by the right-padded
response (R columns). Token-level quantities (log-probs, rewards, advantages) are (B, R) and line
up with the response columns. Two masks: `response_mask` marks real response tokens (not padding: what the
forward pass reads), `loss_mask` the tokens the policy generated (what losses, KL, entropy, advantages and their
denominators count). They differ only in multi-turn rollouts, where tool results sit between the model's turns
with loss_mask 0; a single-turn batch has `loss_mask == response_mask`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

from ppokit.rollout.agent_loop import final_answer, final_answers, one_turn

__all__ = ["RolloutBatch", "build_batch", "concat_batches", "final_answer"]


@dataclass
class RolloutBatch:
    """One step's sequences. B = prompts × rollout_n; P prompt columns; R response columns."""

    records: list[dict]  # one per sequence (the prompt's record, repeated rollout_n times)
    group_ids: torch.Tensor  # (B,) int64; sequences of the same prompt share an id
    prompt_texts: list[str]
    response_texts: list[str]
    input_ids: torch.Tensor  # (B, P + R)
    attention_mask: torch.Tensor  # (B, P + R)
    response_mask: torch.Tensor  # (B, R) float32
    prompt_len: int  # P
    finish_reasons: list[str]
    old_logprobs: torch.Tensor | None = None  # (B, R)
    ref_logprobs: torch.Tensor | None = None  # (B, R)
    rollout_logprobs: torch.Tensor | None = None  # (B, R) from the inference engine, when it gives them
    values: torch.Tensor | None = None  # (B, R)
    scores: torch.Tensor | None = None  # (B,) final scalar reward per sequence
    reward_terms: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (B,)
    token_rewards: torch.Tensor | None = None  # (B, R)
    advantages: torch.Tensor | None = None  # (B, R)
    returns: torch.Tensor | None = None  # (B, R)
    stats: dict[str, float] = field(default_factory=dict)  # rollout/reward facts for logging
    temperature: float = 1.0  # sampling temperature of the rollout; log-probs are taken at the same one
    loss_mask: torch.Tensor | None = None  # (B, R) float32: 1 on the policy's own tokens; None -> response_mask
    turns: list[list[dict]] | None = None  # per sequence its segments (one model turn in a single-turn rollout)
    score_fields: list[dict] | None = None  # per sequence, extra fields its reward functions see (conversation)
    rollout_rewards: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> (B,) earned in the rollout
    policy_version: torch.Tensor | None = None  # (B,) int64: updates done when the weights that generated it synced
    reward_notes: list[dict] | None = None  # per sequence: what reward sources said (the judge's verdict)
    # (B, R) int64, partial_rollout: switch only: the policy version that sampled each response token (its row's
    # policy_version until the weights switched mid-generation; past the response, the row's last one)
    token_version: torch.Tensor | None = None
    # which phases of `training.phases.PHASES` made this value (set by `phases.walk`), and the draw it came from:
    # the rollout's serial number, one per batch, kept by every later phase (a batch is trained on once)
    phases_done: tuple[str, ...] = ()
    origin: int = -1

    def __post_init__(self):
        if self.loss_mask is None:
            self.loss_mask = self.response_mask.clone()

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        """A summary, not the tensors: e.g. RolloutBatch(8 sequences = 2 prompts x 4, reward mean 0.5, ...)."""
        groups = len(set(self.group_ids.tolist()))
        lengths = self.response_lengths
        parts = [f"{len(self)} sequences = {groups} prompts x {len(self) // max(groups, 1)}",
                 f"prompt columns {self.prompt_len}",
                 f"response length mean {float(lengths.mean()):.1f} (max {int(lengths.max())})" if len(self) else ""]
        parts.append("not scored" if self.scores is None else
                     f"reward mean {float(self.scores.float().mean()):.3g} (min {float(self.scores.min()):.3g}, "
                     f"max {float(self.scores.max()):.3g})")
        parts.append("advantages computed" if self.advantages is not None else "no advantages yet")
        return "RolloutBatch(" + ", ".join(p for p in parts if p) + ")"

    def _repr_html_(self) -> str:
        """In a notebook: the summary line over the table of `ppokit.widgets.show_batch`."""
        from html import escape

        from ppokit.widgets import show_batch

        return f"<p><code>{escape(repr(self))}</code></p>" + show_batch(self)._repr_html_()

    @property
    def response_lengths(self) -> torch.Tensor:
        """(B,) number of real response tokens (tool results included)."""
        return self.response_mask.sum(-1)

    @property
    def model_lengths(self) -> torch.Tensor:
        """(B,) number of tokens the policy generated (loss_mask); equals response_lengths in single-turn."""
        return self.loss_mask.sum(-1)

    def select(self, index: torch.Tensor | list[int]) -> RolloutBatch:
        """A new batch with the sequences at `index` (tensors indexed on dim 0, lists picked)."""
        idx = torch.as_tensor(index, dtype=torch.long, device=self.response_mask.device)
        picked = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor):
                picked[f.name] = value.index_select(0, idx)
            elif isinstance(value, list):
                picked[f.name] = [value[i] for i in idx.tolist()]
            elif isinstance(value, dict) and f.name in ("reward_terms", "rollout_rewards"):
                picked[f.name] = {k: v.index_select(0, idx) for k, v in value.items()}
        return replace(self, **picked)

    def trimmed(self) -> RolloutBatch:
        """Drop prompt columns that are padding in every row and response columns past the longest response.

        Used per micro-batch so that short micro-batches do not pay for the longest sequence of the step.
        """
        prompt_cols = self.attention_mask[:, : self.prompt_len].sum(0) > 0
        first = int(prompt_cols.nonzero()[0]) if prompt_cols.any() else self.prompt_len
        resp_cols = self.response_mask.sum(0) > 0
        last = int(resp_cols.nonzero()[-1]) + 1 if resp_cols.any() else 1
        cut = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("input_ids", "attention_mask"):
                cut[f.name] = torch.cat([value[:, first : self.prompt_len], value[:, self.prompt_len : self.prompt_len + last]], 1)
            elif isinstance(value, torch.Tensor) and value.dim() == 2 and f.name != "input_ids":
                cut[f.name] = value[:, :last]
        return replace(self, prompt_len=self.prompt_len - first, **cut)


def build_batch(
    records: list[dict],
    prompt_ids: list[list[int]],
    prompt_texts: list[str],
    prompt_index: list[int],
    response_ids: list[list[int]],
    finish_reasons: list[str],
    tokenizer,
    rollout_logprobs: list[list[float]] | None = None,
    group_offset: int = 0,
    loss_masks: list[list[int]] | None = None,
    turns: list[list[dict]] | None = None,
    answers: list[str] | None = None,
    score_fields: list[dict] | None = None,
    rollout_rewards: dict[str, list[float]] | None = None,
    policy_version: int = 0,
    token_switches: list[list[int]] | None = None,
) -> RolloutBatch:
    """Assemble a RolloutBatch from per-prompt token ids and the rollout's per-response output.

    prompt_index[j] names the prompt (index into records/prompt_ids) that response j answers; its
    group id is `group_offset + prompt_index[j]`. loss_masks[j] (len(response_ids[j])): 1 on the model's
    tokens, 0 on tool results (multi-turn); None: every response token is the model's. turns / answers /
    score_fields / rollout_rewards as `ppokit.rollout.agent_loop.rollout` gives them; turns None: one model turn
    per row. response_texts are the final answers (the last model turn), what reward functions score.
    token_switches[j][t]: weight switches before token t of response j (partial rollouts) -> token_version.
    """
    pad = tokenizer.pad_token_id
    P = max(len(prompt_ids[i]) for i in prompt_index)
    R = max(1, max((len(r) for r in response_ids), default=1))
    B = len(response_ids)
    input_ids = torch.full((B, P + R), pad, dtype=torch.long)
    attention = torch.zeros((B, P + R), dtype=torch.long)
    response_mask = torch.zeros((B, R), dtype=torch.float32)
    logprobs = torch.zeros((B, R)) if rollout_logprobs is not None else None
    loss_mask = torch.zeros((B, R), dtype=torch.float32) if loss_masks is not None else None
    switches = torch.zeros((B, R), dtype=torch.long) if token_switches is not None else None
    for j, (i, resp) in enumerate(zip(prompt_index, response_ids)):
        prompt = prompt_ids[i]
        input_ids[j, P - len(prompt) : P] = torch.tensor(prompt, dtype=torch.long)
        attention[j, P - len(prompt) : P] = 1
        if resp:
            input_ids[j, P : P + len(resp)] = torch.tensor(resp, dtype=torch.long)
            attention[j, P : P + len(resp)] = 1
            response_mask[j, : len(resp)] = 1.0
            if loss_mask is not None:
                loss_mask[j, : len(resp)] = torch.tensor(loss_masks[j], dtype=torch.float32)
            if logprobs is not None:
                logprobs[j, : len(resp)] = torch.tensor(rollout_logprobs[j][: len(resp)])
            if switches is not None:
                switches[j, : len(resp)] = torch.tensor(token_switches[j][: len(resp)], dtype=torch.long)
    if turns is None:
        turns = [[one_turn(ids, tokenizer)] for ids in response_ids]
    texts = answers if answers is not None else final_answers(response_ids, turns, tokenizer)
    extra = {k: torch.tensor(v, dtype=torch.float32) for k, v in (rollout_rewards or {}).items()}
    return RolloutBatch(
        records=[records[i] for i in prompt_index],
        group_ids=torch.tensor([group_offset + i for i in prompt_index], dtype=torch.long),
        prompt_texts=[prompt_texts[i] for i in prompt_index],
        response_texts=texts,
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=response_mask,
        prompt_len=P,
        finish_reasons=list(finish_reasons),
        rollout_logprobs=logprobs,
        loss_mask=loss_mask,
        turns=turns,
        score_fields=score_fields if score_fields is not None else [{} for _ in response_ids],
        rollout_rewards=extra,
        policy_version=torch.full((B,), policy_version, dtype=torch.long),
        token_version=None if switches is None else policy_version + switches.cummax(1).values,
    )


def concat_batches(batches: list[RolloutBatch], tokenizer) -> RolloutBatch:
    """Join batches (e.g. dynamic-sampling rounds), re-padding prompts and responses to common widths."""
    if len(batches) == 1:
        return batches[0]
    P = max(b.prompt_len for b in batches)
    R = max(b.response_mask.shape[1] for b in batches)
    pad = tokenizer.pad_token_id

    def widen(b: RolloutBatch) -> RolloutBatch:
        lp, rp = P - b.prompt_len, R - b.response_mask.shape[1]
        out = {}
        for f in fields(b):
            v = getattr(b, f.name)
            if f.name in ("input_ids", "attention_mask"):
                fill = pad if f.name == "input_ids" else 0
                out[f.name] = torch.nn.functional.pad(v, (lp, rp), value=fill)
            elif isinstance(v, torch.Tensor) and v.dim() == 2:
                out[f.name] = torch.nn.functional.pad(v, (0, rp), value=0.0)
        return replace(b, prompt_len=P, **out)

    wide = [widen(b) for b in batches]
    merged = {}
    for f in fields(wide[0]):
        vals = [getattr(b, f.name) for b in wide]
        if isinstance(vals[0], torch.Tensor):
            merged[f.name] = torch.cat(vals, 0)
        elif isinstance(vals[0], list):
            merged[f.name] = [x for v in vals for x in v]
        elif f.name in ("reward_terms", "rollout_rewards") and vals[0]:
            merged[f.name] = {k: torch.cat([v[k] for v in vals]) for k in vals[0]}
    return replace(wide[0], **merged)

