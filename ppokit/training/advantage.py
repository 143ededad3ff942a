"""From scores to advantages, per `rl_algorithm`: token rewards, KL in the reward, the estimator.

Orchestration only: the algorithm table (`algos.ALGORITHMS`) says which estimator runs and whether
KL goes into the reward; the estimator comes from `algos.ADVANTAGE_ESTIMATORS` by that name, fed by
`estimator_inputs_of` (the one adapter from a batch and the arguments to the estimators' inputs).
Every mask here is the loss mask: in a multi-turn batch the score sits on the last token the model
generated, and tool results get neither KL nor advantages.

PPO (as PaddleNLP): the score sits on the last response token, every response token gets
-beta * KL(actor_old || ref) with the `kl_penalty` estimator (beta = the KL controller's value), and
GAE(gamma, lam) over the response mask gives advantages and returns (returns = raw GAE advantages +
values: the critic's regression target). `normalize_advantage` whitens GAE's advantages over all
valid tokens of all data-parallel ranks; ppokit does this unless it is explicitly false (PaddleNLP
leaves an unset value off; verl, TRL and OpenRLHF always whiten GAE advantages).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ppokit.algos import algorithm
from ppokit.algos import kl as kl_math
from ppokit.algos.advantages import compute_advantages, score_to_token_rewards
from ppokit.algos.masked import masked_mean
from ppokit.engine import all_reduce_sum, default_group
from ppokit.training.batch import RolloutBatch


def kl_in_reward(batch: RolloutBatch, token_rewards: torch.Tensor, estimator: str, beta: float):
    """(r_t - beta * KL_t on every valid response token, metrics averaged over all ranks)."""
    if batch.old_logprobs is None:
        raise ValueError("KL in the reward needs the actor's log-probs at rollout time (batch.old_logprobs); "
                         "get the batch from Session.rollout().")
    mask = batch.loss_mask
    token_rewards, kl = kl_math.apply_kl_penalty(token_rewards, batch.old_logprobs, batch.ref_logprobs, mask, beta,
                                                 estimator)
    n_tok, kl_sum, n_seq = all_reduce_sum(float(mask.sum()), float((kl * mask).sum()), float(len(mask)))
    metrics = {
        "kl/reward_kl": kl_sum / max(n_tok, 1.0),  # mean per token
        "kl/seq_kl_mean": kl_sum / max(n_seq, 1.0),  # mean per response (what target_kl refers to)
        "kl/reward_penalty_mean": -beta * kl_sum / max(n_seq, 1.0),
    }
    return token_rewards, metrics


def with_advantages(batch: RolloutBatch, args, beta: float) -> RolloutBatch:
    """A copy of `batch` with token_rewards, advantages and returns (B, R), and the metrics in `stats`.

    Needs batch.scores (B,); batch.ref_logprobs and batch.old_logprobs when KL is in the reward;
    batch.values for an estimator that needs a critic.
    """
    if batch.scores is None:
        raise ValueError("advantages need scores: score the batch first (Session.score(batch)).")
    algo = algorithm(args.rl_algorithm)
    mask = batch.loss_mask
    scores = batch.scores.float()
    metrics: dict[str, float] = {}
    token_rewards = score_to_token_rewards(scores, mask)
    if algo.kl_in_reward and args.kl_coeff > 0 and batch.ref_logprobs is not None:
        token_rewards, kl_metrics = kl_in_reward(batch, token_rewards, args.kl_penalty, beta)
        metrics.update(kl_metrics)
    if algo.kl_in_reward and args.kl_coeff > 0:  # beta means something only while KL is in the reward
        metrics["kl/beta"] = float(beta)
    if algo.needs_critic and batch.values is None:
        raise ValueError(f"{args.rl_algorithm} advantages need the critic's values (batch.values); get the batch "
                         "from Session.rollout().")
    advantages, returns = compute_advantages(algo.estimator, **estimator_inputs_of(batch, args, token_rewards))
    metrics["advantages/mean"] = float(masked_mean(advantages, mask))
    metrics["advantages/abs_mean"] = float(masked_mean(advantages.abs(), mask))
    metrics["returns/mean"] = float(masked_mean(returns, mask))
    return replace(batch, token_rewards=token_rewards, advantages=advantages, returns=returns,
                   stats={**batch.stats, **metrics})


def estimator_inputs_of(batch: RolloutBatch, args, token_rewards: torch.Tensor) -> dict:
    """Every input an estimator may name, from the batch and the arguments; each estimator takes what it declares."""
    return dict(token_rewards=token_rewards, mask=batch.loss_mask, scores=batch.scores.float(),
                group_ids=batch.group_ids, values=batch.values, gamma=args.gamma, lam=args.lam,
                norm_by_std=args.norm_adv_by_std_in_grpo, whiten=args.normalize_advantage is not False,
                group=default_group(), lam_critic=args.lam_critic, length_alpha=args.length_adaptive_alpha)
