"""From scores to advantages, per `rl_algorithm`: reward shaping, KL in the reward, the estimator.

Orchestration only: every formula lives in `ppokit.algos`.

PPO (as PaddleNLP): the score sits on the last response token, every response token gets
-beta * KL(actor_old || ref) with the `kl_penalty` estimator (beta = the KL controller's value), and
GAE(gamma, lam) over the response mask gives advantages and returns (returns = raw GAE advantages +
values: the critic's regression target). `normalize_advantage` then whitens the advantages over all
valid tokens of all data-parallel ranks; ppokit does this unless it is explicitly false (PaddleNLP
leaves an unset value off; verl, TRL and OpenRLHF always whiten GAE advantages).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ppokit.algos import advantages as adv
from ppokit.algos import kl as kl_math
from ppokit.algos.masked import masked_mean
from ppokit.training.batch import RolloutBatch

GROUP_ALGORITHMS = {"grpo", "drgrpo", "dapo", "rloo", "reinforce_plus_plus_baseline"}
KL_IN_REWARD = {"ppo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"}


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment (B,): 0 up to max_len - buffer, then linearly down to -factor.

    lengths: (B,) response lengths in tokens.
    """
    start = max_len - buffer
    over = (lengths.float() - start).clamp_min(0.0)
    return -factor * (over / max(buffer, 1)).clamp_max(1.0)


def score_to_token_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, R) token rewards with each sequence's score on its last valid response token."""
    token_rewards = torch.zeros_like(mask)
    last = (mask.sum(-1).long() - 1).clamp_min(0)
    token_rewards[torch.arange(len(scores)), last] = scores.to(mask.dtype)
    return token_rewards * mask


def global_sums(*values: float) -> list[float]:
    """The values summed over data-parallel ranks (themselves in a single process)."""
    t = torch.tensor(values, dtype=torch.float64)
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t)
    return t.tolist()


def global_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(B, R) x whitened with the mean and unbiased variance of its valid tokens on all ranks; 0 on padding."""
    m = mask.to(x.dtype)
    n, total, total_sq = global_sums(float(m.sum()), float((x * m).sum()), float((x * x * m).sum()))
    if n < 2:
        return torch.zeros_like(x)
    mean = total / n
    var = max(total_sq - n * mean * mean, 0.0) / (n - 1)
    return (x - mean) * (var + eps) ** -0.5 * m


def kl_in_reward(batch: RolloutBatch, token_rewards: torch.Tensor, args, beta: float) -> tuple[torch.Tensor, dict]:
    """r_t - beta * KL_t on every valid response token; metrics averaged over all ranks."""
    if batch.old_logprobs is None:
        raise ValueError("KL in the reward needs the actor's log-probs at rollout time (batch.old_logprobs); "
                         "get the batch from Session.rollout().")
    mask = batch.response_mask
    token_rewards, kl = kl_math.apply_kl_penalty(
        token_rewards, batch.old_logprobs, batch.ref_logprobs, mask, beta, args.kl_penalty
    )
    n_tok, kl_sum, n_seq = global_sums(float(mask.sum()), float((kl * mask).sum()), float(len(mask)))
    metrics = {
        "kl/reward_kl": kl_sum / max(n_tok, 1.0),  # mean per token
        "kl/seq_kl_mean": kl_sum / max(n_seq, 1.0),  # mean per response (what target_kl refers to)
        "kl/reward_penalty_mean": -beta * kl_sum / max(n_seq, 1.0),
    }
    return token_rewards, metrics


def ppo_advantages(batch: RolloutBatch, token_rewards: torch.Tensor, args) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages (whitened unless normalize_advantage is false) and returns (B, R)."""
    if batch.values is None:
        raise ValueError("PPO advantages need the critic's values (batch.values); get the batch from Session.rollout().")
    mask = batch.response_mask
    _, returns = adv.gae(token_rewards, batch.values, mask, args.gamma, args.lam)
    raw = (returns - batch.values.to(returns.dtype)) * mask  # GAE before whitening
    if args.normalize_advantage is False:
        return raw, returns
    return global_whiten(raw, mask), returns


def compute_advantages(batch: RolloutBatch, args, kl_ctl) -> dict[str, float]:
    """Fill batch.token_rewards, batch.advantages and batch.returns; return metrics.

    Needs batch.scores (B,); batch.ref_logprobs and batch.old_logprobs when KL is in the reward;
    batch.values for PPO.
    """
    algo = args.rl_algorithm
    mask = batch.response_mask
    scores = batch.scores.float()
    metrics: dict[str, float] = {}
    token_rewards = score_to_token_rewards(scores, mask)
    if algo in KL_IN_REWARD and args.kl_coeff > 0 and batch.ref_logprobs is not None:
        token_rewards, kl_metrics = kl_in_reward(batch, token_rewards, args, kl_ctl.value)
        metrics.update(kl_metrics)
    metrics["kl/beta"] = float(kl_ctl.value)
    batch.token_rewards = token_rewards
    if algo in ("grpo", "dapo"):
        batch.advantages, batch.returns = adv.grpo(scores, batch.group_ids, mask, norm_by_std=args.norm_adv_by_std_in_grpo)
    elif algo == "drgrpo":
        batch.advantages, batch.returns = adv.grpo(scores, batch.group_ids, mask, norm_by_std=False)
    elif algo == "rloo":
        batch.advantages, batch.returns = adv.rloo(scores, batch.group_ids, mask)
    elif algo == "reinforce_plus_plus":
        batch.advantages, batch.returns = adv.reinforce_pp(token_rewards, mask, args.gamma)
    elif algo == "reinforce_plus_plus_baseline":
        batch.advantages, batch.returns = adv.reinforce_pp_baseline(token_rewards, batch.group_ids, mask, args.gamma)
    elif algo == "ppo":
        batch.advantages, batch.returns = ppo_advantages(batch, token_rewards, args)
    else:
        raise ValueError(f"rl_algorithm {algo!r} has no advantage estimator")
    metrics["advantages/mean"] = float(masked_mean(batch.advantages, mask))
    metrics["advantages/abs_mean"] = float(masked_mean(batch.advantages.abs(), mask))
    metrics["returns/mean"] = float(masked_mean(batch.returns, mask))
    return metrics


def zero_std_groups(scores: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(G,) group ids whose scores are all equal (no learning signal for group-relative methods)."""
    ids = torch.unique(group_ids)
    flat = [g for g in ids.tolist() if float(scores[group_ids == g].std(unbiased=False)) <= eps]
    return torch.tensor(flat, dtype=torch.long)
