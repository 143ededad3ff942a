"""The step's phases as functions of (state, args, batch): rollout, score, advantages, update.

Session methods are one-line calls into these, so notebooks and `run_ppo.py` run the same code.
"""

from __future__ import annotations

import math
import time

import torch

from ppokit.rewards import compute_rewards, skipped_groups
from ppokit.rollout import SamplingParams
from ppokit.training.actor import actor_update
from ppokit.training.advantage import (
    GROUP_ALGORITHMS,
    KL_IN_REWARD,
    compute_advantages,
    overlong_penalty,
    zero_std_groups,
)
from ppokit.training.batch import RolloutBatch, build_batch, concat_batches
from ppokit.training.distributed import all_ranks_min, over_ranks
from ppokit.training.forward import batched_logprobs


def sampling_params(args, n: int | None = None, temperature: float | None = None) -> SamplingParams:
    """Generation settings from the (possibly just edited) arguments."""
    temp = args.temperature if temperature is None else temperature
    return SamplingParams(
        n=args.rollout_n if n is None else n,
        max_new_tokens=args.max_dec_len,
        min_new_tokens=args.min_dec_len,
        temperature=temp,
        top_p=args.top_p,
        top_k=args.top_k,
        repetition_penalty=args.repetition_penalty,
        do_sample=temp > 0,
    )


def generate(state, records: list[dict], sampling: SamplingParams, group_offset: int) -> RolloutBatch:
    """Generate `sampling.n` responses for each record (already encoded) and assemble the batch."""
    prompt_ids = [r["_prompt_ids"] for r in records]
    texts = [r["_prompt_text"] for r in records]
    out = state.rollout_engine.generate(prompt_ids, sampling)
    batch = build_batch(
        records, prompt_ids, texts, out.prompt_index, out.response_ids, out.finish_reasons,
        state.policy.tokenizer, rollout_logprobs=out.logprobs, group_offset=group_offset,
    )
    batch.temperature = sampling.temperature if sampling.temperature > 0 else 1.0
    return batch


def draw_local_prompts(state) -> tuple[list[dict], int]:
    """This rank's share of the step's prompts (whole groups per rank) and its group-id offset."""
    records = state.loader.next_batch()
    per_rank = state.plan.prompts_per_rank
    rank = state.dist.rank
    offset = state.rollouts_drawn * state.plan.prompts_per_step + rank * per_rank
    state.rollouts_drawn += 1
    return records[rank * per_rank : (rank + 1) * per_rank], offset


def rollout(state, args) -> RolloutBatch:
    """Draw prompts, generate, and attach the log-probs / values the later phases need."""
    started = time.perf_counter()
    if args.dynamic_sampling:
        batch = dynamic_sampling_rollout(state, args)
    else:
        records, offset = draw_local_prompts(state)
        batch = generate(state, records, sampling_params(args), offset)
    batch.stats["timing/rollout_s"] = time.perf_counter() - started
    attach_logprobs(state, args, batch)
    return batch


def dynamic_sampling_rollout(state, args) -> RolloutBatch:
    """DAPO: keep generating until the step has enough groups whose rewards are not all equal."""
    need = state.plan.prompts_per_rank
    kept: list[RolloutBatch] = []
    have, dropped, rounds = 0, 0, 0
    while all_ranks_min(have) < need:  # every rank draws as often, so the loaders stay in step
        rounds += 1
        if args.max_gen_batches > 0 and rounds > args.max_gen_batches:
            raise RuntimeError(
                f"dynamic_sampling: after {args.max_gen_batches} generation rounds only {have} of {need} "
                "prompt groups had rewards that differ; raise max_gen_batches, make the task easier/harder, "
                "or turn dynamic_sampling off"
            )
        records, offset = draw_local_prompts(state)
        part = generate(state, records, sampling_params(args), offset)
        score(state, args, part)
        flat = zero_std_groups(part.scores, part.group_ids)
        keep = ~torch.isin(part.group_ids, flat)
        dropped += len(flat)
        if keep.any():
            kept.append(part.select(keep.nonzero().squeeze(1)))
            have += len(torch.unique(kept[-1].group_ids))
    batch = concat_batches(kept, state.policy.tokenizer)
    groups = torch.unique_consecutive(batch.group_ids)[:need]
    batch = batch.select(torch.isin(batch.group_ids, groups).nonzero().squeeze(1))
    batch.stats.update({"groups/dropped_zero_std": float(dropped), "groups/gen_rounds": float(rounds)})
    return batch


def needs_reference(args) -> bool:
    """A reference model is used when a KL term is on (loss or reward)."""
    return args.kl_loss_coeff > 0 or (args.rl_algorithm in KL_IN_REWARD and args.kl_coeff > 0)


def attach_logprobs(state, args, batch: RolloutBatch) -> None:
    """Reference log-probs (KL), old log-probs (several updates per rollout, or KL in reward), values (PPO)."""
    policy, mbs = state.policy, state.logprob_batch_size
    started = time.perf_counter()
    if needs_reference(args):
        batch.ref_logprobs = state.reference_logprobs(batch)
    batch.stats["timing/ref_s"] = time.perf_counter() - started
    started = time.perf_counter()
    several_updates = state.plan.optimizer_steps_per_rollout > 1
    if several_updates or (args.rl_algorithm in KL_IN_REWARD and args.kl_coeff > 0):
        batch.old_logprobs = batched_logprobs(
            policy.engine.module, batch, mbs, args.chunk_size, policy.compute_dtype, policy.device, batch.temperature
        )
    if state.critic is not None:
        batch.values = state.critic.values(batch)
    batch.stats["timing/old_logprob_s"] = time.perf_counter() - started


def score(state, args, batch: RolloutBatch) -> None:
    """batch.scores (B,): combined rewards, DAPO overlong shaping, clipping, normalisation."""
    started = time.perf_counter()
    total, per_fn = compute_rewards(state.reward_fns, batch.prompt_texts, batch.response_texts, batch.records)
    if torch.isnan(total).any():
        keep, n_skipped = skipped_groups(total, args.rollout_n)
        state.skipped_groups += n_skipped
        per_fn = {k: v[keep] for k, v in per_fn.items()}
        total = total[keep]
        batch.__dict__.update(batch.select(keep.nonzero().squeeze(1)).__dict__)
        if len(batch) == 0:
            raise RuntimeError("every group of this step failed to get a reward from the reward server")
    if args.enable_overlong_reward_buffer:
        penalty = overlong_penalty(batch.response_lengths, args.max_dec_len, args.overlong_reward_buffer,
                                   args.overlong_penalty_factor)
        per_fn["overlong"] = penalty
        total = total + penalty
    batch.stats["reward/raw_mean"] = float(total.mean())
    if args.normalize_reward and state.reward_normalizer is not None:
        total = state.reward_normalizer(total)  # PaddleNLP normalises first, then clips
    total = total.clamp(-args.clip_range_score, args.clip_range_score)
    batch.scores = total
    batch.reward_terms = per_fn
    batch.stats["reward/skipped_groups"] = float(state.skipped_groups)
    batch.stats["timing/reward_s"] = time.perf_counter() - started


def advantages(state, args, batch: RolloutBatch) -> None:
    """batch.token_rewards, batch.advantages, batch.returns per rl_algorithm."""
    if batch.scores is None:
        score(state, args, batch)
    batch.stats.update(compute_advantages(batch, args, state.kl_ctl))


def update(state, args, batch: RolloutBatch) -> dict[str, float]:
    """Critic and actor optimizer steps on the batch, KL controller update, rollout weight sync."""
    if batch.advantages is None:
        advantages(state, args, batch)
    started = time.perf_counter()
    metrics: dict[str, float] = {}
    if state.critic is not None:
        metrics.update(state.critic.update(batch, args, state.plan))
    actor_moves = state.updates_done >= args.critic_warmup_steps or state.critic is None
    if actor_moves:
        policy = state.policy
        metrics.update(actor_update(policy.engine, batch, args, state.plan, policy.compute_dtype, policy.device,
                                    extra_loss=state.ptx_loss))
        state.rollout_engine.update_weights(policy.engine.module)
    state.updates_done += 1
    key = "kl/seq_kl_mean" if "kl/seq_kl_mean" in batch.stats else "actor/kl"  # target_kl is per response
    observed, n = over_ranks(key, batch.stats.get(key, metrics.get(key)), len(batch))  # one beta on all ranks
    if observed is not None and math.isfinite(observed):
        state.kl_ctl.update(observed, n)
    metrics["timing/update_s"] = time.perf_counter() - started
    return metrics


def batch_metrics(batch: RolloutBatch) -> dict[str, float]:
    """reward/*, response_length/*, groups/* and the phase timings recorded on the batch."""
    scores = batch.scores.float()
    lengths = batch.response_lengths.float()
    out = {
        "reward/mean": float(scores.mean()),
        "reward/std": float(scores.std()) if len(scores) > 1 else 0.0,
        "reward/max": float(scores.max()),
        "reward/min": float(scores.min()),
        "response_length/mean": float(lengths.mean()),
        "response_length/max": float(lengths.max()),
        "response_length/clip_ratio": sum(r == "length" for r in batch.finish_reasons) / max(len(batch), 1),
        "groups/zero_std_frac": len(zero_std_groups(scores, batch.group_ids)) / max(len(torch.unique(batch.group_ids)), 1),
    }
    for name, values in batch.reward_terms.items():
        out[f"reward/{name}"] = float(values.float().nanmean())
    out.update(batch.stats)
    return out


def sample_rows(batch: RolloutBatch, limit: int = 4) -> list[dict]:
    """A few (prompt, response, reward, advantage) rows for VisualDL text and samples.jsonl."""
    rows = []
    for i in range(min(limit, len(batch))):
        row = {"prompt": batch.prompt_texts[i], "response": batch.response_texts[i], "reward": float(batch.scores[i])}
        if batch.advantages is not None:
            row["advantage"] = float(batch.advantages[i][batch.response_mask[i] > 0][:1].sum())
        row.update({f"reward/{k}": float(v[i]) for k, v in batch.reward_terms.items()})
        rows.append(row)
    return rows


__all__ = ["rollout", "score", "advantages", "update", "batch_metrics", "sample_rows", "GROUP_ALGORITHMS"]
