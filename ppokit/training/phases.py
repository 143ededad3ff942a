"""The step's phases, each a function from values to values.

    batch = rollout(state, args)                    # draw prompts, generate (the one rollout; policy_version)
    batch = score(state, args, batch)               # + scores, reward_terms (the one scoring rule)
    batch = dynamic_sampling(state, args, batch)    # DAPO: drop flat groups, draw more until full (off: unchanged)
    -- produce above, consume below: the seam an asynchronous trainer puts its queue in --
    batch = with_logprobs(state, args, batch)       # reference/old log-probs, values under the trainer's weights
    batch = advantages(state, args, batch)          # + token_rewards, advantages, returns
    metrics = update(state, args, batch)            # optimizer steps and the rollout weight sync

Each returns a new `RolloutBatch` (the one it was given is left as it was) and raises a clear error when
its predecessor has not run; the order is decided in `Session.step` alone. `state` holds the models and
counters the phases advance (draws, updates, skipped groups).
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import torch

from ppokit.algos.advantages import overlong_penalty, zero_std_groups
from ppokit.args import ConfigError
from ppokit.rewards import RewardServerError, score_responses, skipped_groups
from ppokit.rewards.reports import take_reports
from ppokit.rollout import SamplingParams
from ppokit.training.actor import actor_update
from ppokit.training.advantage import with_advantages
from ppokit.training.batch import RolloutBatch, build_batch, concat_batches
from ppokit.training.critic import critic_update
from ppokit.training.forward import batched_logprobs
from ppokit.training.live import sync_live, warn_flat_groups
from ppokit.training.metrics import all_ranks_min, over_ranks
from ppokit.training.threads import fit_threads
from ppokit.training.update import LossConfig


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
    """Generate `sampling.n` responses for each record (already encoded) through the one rollout
    (`rollout.agent_loop.rollout`: single-turn is its one-turn, no-tool case) and assemble the batch."""
    from ppokit.data.verl_rows import row_is_multi_turn, tools_kwargs_of
    from ppokit.rollout.agent_loop import rollout as run_rollout

    prompt_ids = [r["_prompt_ids"] for r in records]
    texts = [r["_prompt_text"] for r in records]
    version = getattr(state, "updates_done", 0)  # before generating: a partial rollout's update may end meanwhile
    out = run_rollout(state.rollout_engine, state.policy.tokenizer, prompt_ids, sampling, getattr(state, "agent", None),
                      [row_is_multi_turn(r) for r in records], [tools_kwargs_of(r) for r in records])
    batch = build_batch(
        records, prompt_ids, texts, out.prompt_index, out.response_ids, out.finish_reasons,
        state.policy.tokenizer, rollout_logprobs=out.logprobs, group_offset=group_offset,
        loss_masks=out.loss_mask, turns=out.turns, answers=out.answers, score_fields=out.score_fields,
        rollout_rewards=out.rollout_rewards, policy_version=version, token_switches=out.token_switches,
    )
    return replace(batch, temperature=sampling.temperature if sampling.temperature > 0 else 1.0,
                   stats={**batch.stats, **out.stats})


def draw_local_prompts(state) -> tuple[list[dict], int]:
    """This rank's share of the step's prompts (whole groups per rank) and its group-id offset."""
    records = state.loader.next_batch()  # gen_prompts_per_step: more than kept under dynamic sampling
    per_rank = state.plan.gen_prompts_per_step // state.plan.world_size
    rank = state.dist.rank
    offset = state.rollouts_drawn * state.plan.gen_prompts_per_step + rank * per_rank
    state.rollouts_drawn += 1
    return records[rank * per_rank : (rank + 1) * per_rank], offset


def rollout(state, args) -> RolloutBatch:
    """Draw the step's prompts and generate; no log-probs, no scores (`with_logprobs`, `score` follow)."""
    started = time.perf_counter()
    sync_live(state, args)
    threads = fit_threads(state, "rollout")
    records, offset = draw_local_prompts(state)
    batch = generate(state, records, sampling_params(args), offset)
    return replace(batch, stats={**batch.stats, **threads, "timing/rollout_s": time.perf_counter() - started})


def dynamic_sampling(state, args, batch: RolloutBatch) -> RolloutBatch:
    """DAPO's filter (a phase after `score`; the batch unchanged when `dynamic_sampling` is off): drop the groups
    whose rewards are all equal, then draw, generate and score more prompts until the step has
    `prompts_per_rank` groups; the extra rounds' time counts in timing/rollout_s. Counts: groups/dropped_zero_std,
    groups/gen_rounds. A collective per round (every rank draws as often, so the loaders stay in step)."""
    if not args.dynamic_sampling:
        return batch
    started = time.perf_counter()
    need = state.plan.prompts_per_rank
    kept: list[RolloutBatch] = []
    have, dropped, rounds, part = 0, 0, 1, batch
    while True:
        flat = zero_std_groups(part.scores, part.group_ids)
        keep = ~torch.isin(part.group_ids, flat)
        dropped += len(flat)
        if keep.any():
            kept.append(part.select(keep.nonzero().squeeze(1)))
            have += len(torch.unique(kept[-1].group_ids))
        if all_ranks_min(have) >= need:
            break
        rounds += 1
        if args.max_gen_batches > 0 and rounds > args.max_gen_batches:
            raise ConfigError(
                f"dynamic_sampling: after {args.max_gen_batches} generation rounds only {have} of {need} "
                "prompt groups had rewards that differ; raise max_gen_batches, make the task easier/harder, "
                "or turn dynamic_sampling off"
            )
        part = score(state, args, rollout(state, args))
    out = concat_batches(kept, state.policy.tokenizer)
    groups = torch.unique_consecutive(out.group_ids)[:need]
    out = out.select(torch.isin(out.group_ids, groups).nonzero().squeeze(1))
    spent = batch.stats.get("timing/rollout_s", 0.0) + time.perf_counter() - started
    return replace(out, stats={**out.stats, "timing/rollout_s": spent, "groups/dropped_zero_std": float(dropped),
                               "groups/gen_rounds": float(rounds)})


def with_logprobs(state, args, batch: RolloutBatch) -> RolloutBatch:
    """Reference log-probs (KL), old log-probs (several updates per rollout, or KL in reward), values (PPO), all
    under the trainer's weights now (the consuming half of the step: an asynchronous batch gets them from the
    weights it trains, its producer's own log-probs are `rollout_logprobs`)."""
    policy, mbs = state.policy, state.logprob_batch_size
    found: dict = {}
    started = time.perf_counter()
    if args.needs_reference:
        found["ref_logprobs"] = state.reference_logprobs(batch)
    ref_s = time.perf_counter() - started
    started = time.perf_counter()
    several_updates = state.plan.optimizer_steps_per_rollout > 1
    if several_updates or (args.use_kl_in_reward and args.kl_coeff > 0):
        found["old_logprobs"] = batched_logprobs(policy.engine.module, batch, mbs, args.chunk_size,
                                                 policy.compute_dtype, policy.device, batch.temperature)
    if state.critic is not None:
        found["values"] = state.critic.values(batch)
    stats = {**batch.stats, "timing/ref_s": ref_s, "timing/old_logprob_s": time.perf_counter() - started}
    return replace(batch, **found, stats=stats)


def rewards_of(state, batch: RolloutBatch):
    """(total, per_fn) of the batch's rows by the one scoring rule (`ppokit.rewards.score_responses`), the rule
    evaluation uses too: final answers, the rollout's extra fields and its own reward terms."""
    return score_responses(state.reward_fns, batch.prompt_texts, batch.response_texts, batch.records,
                           batch.score_fields, batch.rollout_rewards)


def score(state, args, batch: RolloutBatch) -> RolloutBatch:
    """The batch with scores (B,): combined rewards, DAPO overlong shaping, clipping, normalisation.

    Groups whose reward the reward server could not give are dropped (counted in reward/skipped_groups), and
    ranks are kept at one batch size (`drop_failed_groups`).
    """
    started = time.perf_counter()
    total, per_fn = rewards_of(state, batch)
    reported, notes = take_reports(state.reward_fns, len(batch))  # the judge's counts, cost and verdicts
    batch = replace(batch, reward_notes=notes)
    balanced = 0
    # a collective under skip_group, which every rank takes (NaN rewards come only from skip_group's reward sources)
    if args.reward_on_error == "skip_group" or torch.isnan(total).any():
        batch, total, per_fn, balanced = drop_failed_groups(state, args, batch, total, per_fn)
    if args.enable_overlong_reward_buffer:
        penalty = overlong_penalty(batch.model_lengths,  # the policy's own tokens, not tool results
                                   args.max_dec_len, args.overlong_reward_buffer,
                                   args.overlong_penalty_factor)
        per_fn["overlong"] = penalty
        total = total + penalty
    stats = {**batch.stats, **reported, "reward/raw_mean": float(total.mean())}
    if args.normalize_reward and state.reward_normalizer is not None:
        total = state.reward_normalizer(total)  # PaddleNLP normalises first, then clips
    total = total.clamp(-args.clip_range_score, args.clip_range_score)
    stats["reward/skipped_groups"] = float(state.skipped_groups)
    if balanced:
        stats["reward/groups_dropped_to_balance_ranks"] = float(balanced)
    stats["timing/reward_s"] = time.perf_counter() - started
    return replace(batch, scores=total, reward_terms=per_fn, stats=stats)


def drop_failed_groups(state, args, batch: RolloutBatch, total: torch.Tensor, per_fn: dict):
    """(batch, total, per_fn, groups dropped for balance) without the groups holding a NaN reward, then cut to as
    many groups as the rank that kept fewest (a collective).

    Ranks must train on batches of one size: a rank with fewer sequences runs fewer micro-batches, so its
    all-reduces and ZeRO-3 gathers stop matching the others' and NCCL hangs until its timeout. Whole valid groups
    are dropped from the end of the longer ranks' batches, rather than kept as masked placeholders: the step is
    then exactly a smaller step, with nothing in any denominator, reward statistic or normaliser that was not
    scored. When every group of some rank failed, every rank raises the same error (none waits for it).
    """
    keep = torch.ones_like(total, dtype=torch.bool)
    n_skipped = 0
    if torch.isnan(total).any():
        keep, n_skipped = skipped_groups(total, args.rollout_n)
        state.skipped_groups += n_skipped
    groups = int(keep.sum()) // args.rollout_n
    target = all_ranks_min(groups)
    if target == 0:
        whose = (f"every one of the {n_skipped} prompt groups of this step" if groups == 0 else
                 "every prompt group of another rank")
        raise RewardServerError(
            f"reward_on_error is skip_group and {whose} failed to get a reward, so there is nothing to train on; "
            f"{failure_advice(state.reward_fns, per_fn)}, or set reward_on_error: raise to see the first failure")
    index = keep.nonzero().squeeze(1)[: target * args.rollout_n]
    if len(index) == len(total):
        return batch, total, per_fn, 0
    return batch.select(index), total[index], {k: v[index] for k, v in per_fn.items()}, groups - target


def failure_advice(fns, per_fn: dict) -> str:
    """What to check, from the reward sources that gave no reward (NaN) on this rank: each source's own advice."""
    failed = [f for f in fns if f.name in per_fn and torch.isnan(per_fn[f.name]).any()]
    advice = [f.advice or f"check reward source {f.name!r}" for f in failed]
    return "; ".join(advice) or "check the reward sources on the other ranks (their warnings say which failed)"


def advantages(state, args, batch: RolloutBatch) -> RolloutBatch:
    """The batch with token_rewards, advantages and returns per rl_algorithm (β from the KL controller)."""
    sync_live(state, args)
    warn_flat_groups(state, args, batch)
    return with_advantages(batch, args, state.kl_ctl.value)


def update(state, args, batch: RolloutBatch) -> dict[str, float]:
    """Critic and actor optimizer steps on the batch, KL controller update, rollout weight sync."""
    if batch.advantages is None:
        raise ValueError("the update needs advantages: run Session.compute_advantages(batch) first.")
    started = time.perf_counter()
    sync_live(state, args)
    metrics: dict[str, float] = fit_threads(state, "update")
    cfg = LossConfig.from_args(args)  # once per step: a notebook may have changed args since the last one
    if state.critic is not None:
        metrics.update(critic_update(state.critic, batch, cfg, state.plan))
    if state.updates_done >= args.critic_warmup_steps or state.critic is None:
        metrics.update(actor_update(state.policy, batch, cfg, state.plan, extra_loss=state.ptx_loss))
        state.rollout_engine.update_weights(state.policy.engine.module)
    state.updates_done += 1
    key = "kl/seq_kl_mean" if "kl/seq_kl_mean" in batch.stats else "actor/kl"  # target_kl is per response
    observed, n = over_ranks(key, batch.stats.get(key, metrics.get(key)), len(batch))  # one beta on all ranks
    if observed is not None and math.isfinite(observed):
        state.kl_ctl.update(observed, n)
    metrics["timing/update_s"] = time.perf_counter() - started
    return metrics


__all__ = ["rollout", "score", "dynamic_sampling", "with_logprobs", "advantages", "update", "sampling_params",
           "generate", "rewards_of"]

