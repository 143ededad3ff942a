"""From scores to advantages, per `rl_algorithm`: reward shaping, KL in the reward, the estimator.

Orchestration only: every formula lives in `ppokit.algos`.
"""

from __future__ import annotations

import torch

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
        token_rewards, kl = kl_math.apply_kl_penalty(
            token_rewards, batch.old_logprobs, batch.ref_logprobs, mask, kl_ctl.value, args.kl_penalty
        )
        seq_kl = (kl * mask).sum(-1)
        metrics["kl/reward_kl"] = float(masked_mean(kl, mask))
        metrics["kl/seq_kl_mean"] = float(seq_kl.mean())
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
        batch.advantages, batch.returns = adv.gae(token_rewards, batch.values, mask, args.gamma, args.lam)
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
