"""The step's phases, each a function from values to values, and the one ordered list of them.

    PHASES (in this order; `walk` runs them, nothing else decides the order):
    rollout           producer  draw prompts, generate (the one rollout; each row tagged with its policy_version)
    score             producer  + scores, reward_terms (the one scoring rule)
    dynamic_sampling  producer  DAPO: drop flat groups, draw more until full (off: unchanged)
    -- produce above, consume below: the seam an asynchronous trainer puts its queue in --
    with_logprobs     learner   reference/old log-probs, values under the trainer's weights
    advantages        learner   + token_rewards, advantages, returns
    update            learner   optimizer steps, KL controller, the weights published to the producer

Each phase takes the side that owns what it reads and writes (`training.sides`: Producer, Learner) and returns a
new `RolloutBatch` (the one it was given is left as it was; `update` returns the step's metrics). `walk(producer,
learner, batch, upto)` runs every phase after the last one the batch has been through (`batch.phases_done`) up to
`upto`, each once: `Session.produce`/`consume` and the notebook's `s.rollout()`, `s.score(b)`,
`s.compute_advantages(b)`, `s.update(b)` are all walks to a phase. Live edits reach the learner once per walk,
before its first phase, on the learner's thread (`Learner.apply_live`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

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
from ppokit.training.live import warn_flat_groups
from ppokit.training.metrics import all_ranks_min, over_ranks
from ppokit.training.threads import decoding_threads, fit_threads
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


def generate(producer, records: list[dict], sampling: SamplingParams, group_offset: int) -> RolloutBatch:
    """Generate `sampling.n` responses for each record (already encoded) through the one rollout
    (`rollout.agent_loop.rollout`: single-turn is its one-turn, no-tool case) and assemble the batch."""
    from ppokit.data.verl_rows import row_is_multi_turn, tools_kwargs_of
    from ppokit.rollout.agent_loop import rollout as run_rollout

    prompt_ids = [r["_prompt_ids"] for r in records]
    texts = [r["_prompt_text"] for r in records]
    version = producer.policy_version  # before generating: a partial rollout's update may end meanwhile
    with decoding_threads(producer):
        out = run_rollout(producer.rollout_engine, producer.tokenizer, prompt_ids, sampling, producer.agent,
                          [row_is_multi_turn(r) for r in records], [tools_kwargs_of(r) for r in records])
    batch = build_batch(
        records, prompt_ids, texts, out.prompt_index, out.response_ids, out.finish_reasons,
        producer.tokenizer, rollout_logprobs=out.logprobs, group_offset=group_offset,
        loss_masks=out.loss_mask, turns=out.turns, answers=out.answers, score_fields=out.score_fields,
        rollout_rewards=out.rollout_rewards, policy_version=version, token_switches=out.token_switches,
    )
    return replace(batch, temperature=sampling.temperature if sampling.temperature > 0 else 1.0,
                   stats={**batch.stats, **out.stats})


def draw_local_prompts(producer) -> tuple[list[dict], int]:
    """This rank's share of the step's prompts (whole groups per rank) and its group-id offset."""
    geometry = producer.plan.batch
    records = producer.loader.next_batch()  # gen_prompts_per_step: more than kept under dynamic sampling
    per_rank = geometry.gen_prompts_per_step // geometry.world_size
    rank = producer.dist.rank
    offset = producer.rollouts_drawn * geometry.gen_prompts_per_step + rank * per_rank
    producer.rollouts_drawn += 1
    return records[rank * per_rank : (rank + 1) * per_rank], offset


def rollout(producer) -> RolloutBatch:
    """Draw the step's prompts and generate; no log-probs, no scores (`score`, `with_logprobs` follow). The
    batch's `origin` is its draw's serial number, offset by the producer's own `origin_base`."""
    started = time.perf_counter()
    threads = fit_threads(producer, "rollout")
    origin = producer.origin_base + producer.rollouts_drawn
    records, offset = draw_local_prompts(producer)
    batch = generate(producer, records, sampling_params(producer.args), offset)
    return replace(batch, origin=origin,
                   stats={**batch.stats, **threads, "timing/rollout_s": time.perf_counter() - started})


def dynamic_sampling(producer, batch: RolloutBatch) -> RolloutBatch:
    """DAPO's filter (a phase after `score`; the batch unchanged when `dynamic_sampling` is off): drop the groups
    whose rewards are all equal, then draw, generate and score more prompts until the step has
    `prompts_per_rank` groups; the extra rounds' time counts in timing/rollout_s. Counts: groups/dropped_zero_std,
    groups/gen_rounds. A collective per round (every rank draws as often, so the loaders stay in step)."""
    args = producer.args
    if not args.dynamic_sampling:
        return batch
    started = time.perf_counter()
    need = producer.plan.batch.prompts_per_rank
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
        part = score(producer, rollout(producer))
    out = concat_batches(kept, producer.tokenizer)
    groups = torch.unique_consecutive(out.group_ids)[:need]
    out = out.select(torch.isin(out.group_ids, groups).nonzero().squeeze(1))
    spent = batch.stats.get("timing/rollout_s", 0.0) + time.perf_counter() - started
    return replace(out, origin=batch.origin, stats={**out.stats, "timing/rollout_s": spent,
                                                     "groups/dropped_zero_std": float(dropped),
                               "groups/gen_rounds": float(rounds)})


def with_logprobs(learner, batch: RolloutBatch) -> RolloutBatch:
    """Reference log-probs (KL), old log-probs (several updates per rollout, or KL in reward), values (PPO), all
    under the trainer's weights now (the consuming half of the step: an asynchronous batch gets them from the
    weights it trains, its producer's own log-probs are `rollout_logprobs`)."""
    args, policy, mbs = learner.args, learner.policy, learner.logprob_batch_size
    found: dict = {}
    started = time.perf_counter()
    if args.needs_reference:
        found["ref_logprobs"] = learner.reference_logprobs(batch)
    ref_s = time.perf_counter() - started
    started = time.perf_counter()
    several_updates = learner.plan.batch.optimizer_steps_per_rollout > 1
    if several_updates or (args.use_kl_in_reward and args.kl_coeff > 0):
        found["old_logprobs"] = batched_logprobs(policy.engine.module, batch, mbs, args.chunk_size,
                                                 policy.compute_dtype, policy.device, batch.temperature)
    if learner.critic is not None:
        found["values"] = learner.critic.values(batch)
    stats = {**batch.stats, "timing/ref_s": ref_s, "timing/old_logprob_s": time.perf_counter() - started}
    return replace(batch, **found, stats=stats)


def rewards_of(producer, batch: RolloutBatch):
    """(total, per_fn) of the batch's rows by the one scoring rule (`ppokit.rewards.score_responses`), the rule
    evaluation uses too: final answers, the rollout's extra fields and its own reward terms."""
    return score_responses(producer.reward_fns, batch.prompt_texts, batch.response_texts, batch.records,
                           batch.score_fields, batch.rollout_rewards)


def score(producer, batch: RolloutBatch) -> RolloutBatch:
    """The batch with scores (B,): combined rewards, DAPO overlong shaping, clipping, normalisation.

    Groups whose reward the reward server could not give are dropped (counted in reward/skipped_groups), and
    ranks are kept at one batch size (`drop_failed_groups`).
    """
    args = producer.args
    started = time.perf_counter()
    total, per_fn = rewards_of(producer, batch)
    reported, notes = take_reports(producer.reward_fns, len(batch))  # the judge's counts, cost and verdicts
    batch = replace(batch, reward_notes=notes)
    balanced = 0
    # a collective under skip_group, which every rank takes (NaN rewards come only from skip_group's reward sources)
    if args.reward_on_error == "skip_group" or torch.isnan(total).any():
        batch, total, per_fn, balanced = drop_failed_groups(producer, batch, total, per_fn)
    if args.enable_overlong_reward_buffer:
        penalty = overlong_penalty(batch.model_lengths,  # the policy's own tokens, not tool results
                                   args.max_dec_len, args.overlong_reward_buffer,
                                   args.overlong_penalty_factor)
        per_fn["overlong"] = penalty
        total = total + penalty
    stats = {**batch.stats, **reported, "reward/raw_mean": float(total.mean())}
    if args.normalize_reward and producer.reward_normalizer is not None:
        total = producer.reward_normalizer(total)  # PaddleNLP normalises first, then clips
    total = total.clamp(-args.clip_range_score, args.clip_range_score)
    stats["reward/skipped_groups"] = float(producer.skipped_groups)
    if balanced:
        stats["reward/groups_dropped_to_balance_ranks"] = float(balanced)
    stats["timing/reward_s"] = time.perf_counter() - started
    return replace(batch, scores=total, reward_terms=per_fn, stats=stats)


def drop_failed_groups(producer, batch: RolloutBatch, total: torch.Tensor, per_fn: dict):
    """(batch, total, per_fn, groups dropped for balance) without the groups holding a NaN reward, then cut to as
    many groups as the rank that kept fewest (a collective).

    Ranks must train on batches of one size: a rank with fewer sequences runs fewer micro-batches, so its
    all-reduces and ZeRO-3 gathers stop matching the others' and NCCL hangs until its timeout. Whole valid groups
    are dropped from the end of the longer ranks' batches, rather than kept as masked placeholders: the step is
    then exactly a smaller step, with nothing in any denominator, reward statistic or normaliser that was not
    scored. When every group of some rank failed, every rank raises the same error (none waits for it).
    """
    args = producer.args
    keep = torch.ones_like(total, dtype=torch.bool)
    n_skipped = 0
    if torch.isnan(total).any():
        keep, n_skipped = skipped_groups(total, args.rollout_n)
        producer.skipped_groups += n_skipped
    groups = int(keep.sum()) // args.rollout_n
    target = all_ranks_min(groups)
    if target == 0:
        whose = (f"every one of the {n_skipped} prompt groups of this step" if groups == 0 else
                 "every prompt group of another rank")
        raise RewardServerError(
            f"reward_on_error is skip_group and {whose} failed to get a reward, so there is nothing to train on; "
            f"{failure_advice(producer.reward_fns, per_fn)}, or set reward_on_error: raise to see the first failure")
    index = keep.nonzero().squeeze(1)[: target * args.rollout_n]
    if len(index) == len(total):
        return batch, total, per_fn, 0
    return batch.select(index), total[index], {k: v[index] for k, v in per_fn.items()}, groups - target


def failure_advice(fns, per_fn: dict) -> str:
    """What to check, from the reward sources that gave no reward (NaN) on this rank: each source's own advice."""
    failed = [f for f in fns if f.name in per_fn and torch.isnan(per_fn[f.name]).any()]
    advice = [f.advice or f"check reward source {f.name!r}" for f in failed]
    return "; ".join(advice) or "check the reward sources on the other ranks (their warnings say which failed)"


def advantages(learner, batch: RolloutBatch) -> RolloutBatch:
    """The batch with token_rewards, advantages and returns per rl_algorithm (β from the KL controller)."""
    warn_flat_groups(learner, learner.args, batch)
    return with_advantages(batch, learner.args, learner.kl_ctl.value)


def update(learner, batch: RolloutBatch) -> dict[str, float]:
    """Critic and actor optimizer steps on the batch, KL controller update, the new weights published."""
    args, geometry = learner.args, learner.plan.batch
    if batch.advantages is None:
        raise ValueError("the update needs advantages: run Session.compute_advantages(batch) first.")
    started = time.perf_counter()
    metrics: dict[str, float] = fit_threads(learner, "update")
    cfg = LossConfig.from_args(args)  # once per step: a notebook may have changed args since the last one
    if learner.critic is not None:
        metrics.update(critic_update(learner.critic, batch, cfg, geometry))
    actor_trains = learner.updates_done >= args.critic_warmup_steps or learner.critic is None
    if actor_trains:
        metrics.update(actor_update(learner.policy, batch, cfg, geometry, extra_loss=learner.ptx_loss))
    learner.updates_done += 1
    learner.publish(weights_changed=actor_trains)  # version updates_done; the producer pulls it between batches
    key = "kl/seq_kl_mean" if "kl/seq_kl_mean" in batch.stats else "actor/kl"  # target_kl is per response
    observed, n = over_ranks(key, batch.stats.get(key, metrics.get(key)), len(batch))  # one beta on all ranks
    if observed is not None and math.isfinite(observed):
        learner.kl_ctl.update(observed, n)
    metrics["timing/update_s"] = time.perf_counter() - started
    return metrics


@dataclass(frozen=True)
class Phase:
    name: str
    side: str  # "producer" or "learner": whose objects it reads and advances
    run: Callable


PHASES = (
    Phase("rollout", "producer", lambda producer, batch: rollout(producer)),
    Phase("score", "producer", score),
    Phase("dynamic_sampling", "producer", dynamic_sampling),
    Phase("with_logprobs", "learner", with_logprobs),
    Phase("advantages", "learner", advantages),
    Phase("update", "learner", update),
)
NAMES = tuple(p.name for p in PHASES)
PRODUCED = "dynamic_sampling"  # the last producer phase: a batch past it is what `produce` hands over


def done_through(batch: RolloutBatch | None) -> int:
    """Index in PHASES of the last phase `batch` has been through (-1: none). A batch saved before phases were
    recorded (an older checkpoint's queue) counts as produced when it has scores."""
    if batch is None:
        return -1
    if batch.phases_done:
        return NAMES.index(batch.phases_done[-1])
    return NAMES.index(PRODUCED) if batch.scores is not None else 0


def walk(producer, learner, batch: RolloutBatch | None, upto: str):
    """(batch, metrics): `batch` taken through every phase after the last one it has been through, up to `upto`
    (each once, in PHASES' order); metrics are the update's, or None when the walk stops before it."""
    if upto not in NAMES:
        raise ValueError(f"no phase {upto!r}; the phases are {', '.join(NAMES)}")
    metrics, live_applied = None, False
    for phase in PHASES[done_through(batch) + 1 : NAMES.index(upto) + 1]:
        side = producer if phase.side == "producer" else learner
        if phase.side == "learner" and not live_applied:
            learner.apply_live()  # once per walk, before the learner's first phase, on the learner's thread
            live_applied = True
        out = phase.run(side, batch)
        if phase.name == "update":
            metrics = out
            out = batch
        batch = replace(out, phases_done=(*batch.phases_done, phase.name) if batch is not None else (phase.name,),
                        origin=out.origin if batch is None else batch.origin)
    return batch, metrics


class Ledger:
    """A Session's record of the batches it walked: the newest value made from each draw (`batch.origin`), so a
    notebook holding the first value still reaches the scored one, and the draws already trained on (once each)."""

    def __init__(self, keep: int = 4):
        self.latest: dict[int, RolloutBatch] = {}
        self.consumed: set[int] = set()
        self.keep = keep

    def newest(self, batch):
        """The newest value made from `batch`: one a later phase made, else `batch` itself (also a value the
        caller made from it by hand, e.g. with other advantages, and anything that is not a tracked batch)."""
        if not isinstance(batch, RolloutBatch) or batch.origin < 0:  # (an older checkpoint's queue: no origin)
            return batch
        known = self.latest.get(batch.origin)
        return known if known is not None and done_through(known) > done_through(batch) else batch

    def walk(self, producer, learner, batch: RolloutBatch | None, upto: str, call: str = "walk"):
        """`walk` from the newest value of `batch`; a second update of one draw is refused with a sentence, and so
        is something else than a batch (None, a list, a dict) given to a method named `call`."""
        from ppokit.errors import PpokitError

        if call != "walk" and not isinstance(batch, RolloutBatch):
            raise PpokitError(f"{call}() needs the batch that rollout() returned, got {type(batch).__name__}: "
                              f"batch = s.rollout(); s.{call}(batch)")
        batch = self.newest(batch)
        if upto == "update" and batch is not None and batch.origin in self.consumed:
            raise PpokitError("this batch was trained on already (an update consumes it once): draw a new one, "
                              "batch = s.rollout(), or call s.step()")
        metrics = None
        if batch is None or NAMES.index(upto) > done_through(batch):
            batch, metrics = walk(producer, learner, batch, upto)
        if batch.origin >= 0:
            self.latest = {**dict(list(self.latest.items())[1 - self.keep:]), batch.origin: batch}
            if metrics is not None:
                self.consumed.add(batch.origin)
        return batch, metrics


__all__ = ["PHASES", "Ledger", "walk", "rollout", "score", "dynamic_sampling", "with_logprobs", "advantages", "update",
           "sampling_params", "generate", "rewards_of"]
