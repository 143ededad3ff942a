"""Advantage estimators: GRPO / Dr.GRPO, RLOO, REINFORCE++ (+ group baseline), GAE and VAPO's
decoupled, length-adaptive GAE.

Notation: B sequences (responses), T response positions, ``mask`` (B, T) marks valid tokens.
``scores`` (B,) are sequence-level rewards; ``token_rewards`` (B, T) are per-token rewards
(outcome score on the last valid token, plus any per-token KL penalty).
``group_ids`` (B,) integers say which prompt each response answers: responses with the same id
form a group. Groups may appear in any order and need not be contiguous.

All estimators return ``(advantages, returns)``, both (B, T), exactly 0 on masked tokens, and
carry no gradient (they run under ``torch.no_grad``).

``ADVANTAGE_ESTIMATORS`` maps the estimator name (``ppokit.algorithms.ALGORITHMS[name].estimator``)
to a uniform entry point ``fn(token_rewards, mask, *, scores=None, group_ids=None, values=None,
gamma=1.0, lam=1.0, norm_by_std=True, eps=1e-6, whiten=True, group=None, lam_critic=None,
length_alpha=None)`` (the last two read by gae and vapo); outcome estimators
(grpo, drgrpo, rloo) use ``scores`` (B,) when given, else the score of sequence i as
sum_t token_rewards[i, t] m[i, t]. ``whiten`` / ``group`` are GAE's (whiten over the valid tokens
of every rank of the process group). ``compute_advantages(name, ...)`` calls it by name.
"""

from __future__ import annotations

import torch

from .masked import as_float_mask, masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "grpo",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "gae",
    "length_adaptive_lambda",
    "decoupled_gae",
    "compute_advantages",
    "ADVANTAGE_ESTIMATORS",
    "overlong_penalty",
    "score_to_token_rewards",
    "zero_std_groups",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]


def _float_scores(scores: torch.Tensor) -> torch.Tensor:
    """Scores as a floating (B,) tensor (float32 unless already floating); raise on NaN/inf.

    scores: (B,) -> (B,).
    """
    if scores.dim() != 1:
        raise ValueError(f"scores must have shape (B,), got {tuple(scores.shape)}")
    s = scores if scores.is_floating_point() else scores.float()
    if not bool(torch.isfinite(s).all()):
        raise ValueError("scores contain NaN or inf; refusing to compute advantages from them")
    return s


def _group_stats(scores: torch.Tensor, group_ids: torch.Tensor):
    """Per-group count, mean and "all scores equal" flag, vectorised with index_add/scatter_reduce.

    scores: (B,) float, group_ids: (B,) int ->
    inv (B,) long group index of each row, counts (G,) float, mean (G,), constant (G,) bool.
    """
    if group_ids.shape != scores.shape:
        raise ValueError(f"group_ids shape {tuple(group_ids.shape)} != scores shape {tuple(scores.shape)}")
    _, inv, counts = torch.unique(group_ids.to(scores.device), return_inverse=True, return_counts=True)
    g = counts.numel()
    counts = counts.to(scores.dtype)
    mean = scores.new_zeros(g).index_add_(0, inv, scores) / counts
    gmax = scores.new_zeros(g).scatter_reduce_(0, inv, scores, "amax", include_self=False)
    gmin = scores.new_zeros(g).scatter_reduce_(0, inv, scores, "amin", include_self=False)
    return inv, counts, mean, gmax == gmin


def _broadcast(per_seq: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Spread a per-sequence value over the valid tokens of its row.

    per_seq: (B,), mask: (B, T) -> (B, T), 0 on masked tokens.
    """
    m = as_float_mask(mask, per_seq)
    return per_seq[:, None] * m


@torch.no_grad()
def grpo(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    mask: torch.Tensor,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO group-relative advantage (Dr.GRPO with ``norm_by_std=False``).

    scores: (B,), group_ids: (B,) int, mask: (B, T) -> (advantages, returns), both (B, T).
    A_i = (s_i - mu_g) / (sigma_g + eps) with mu_g the group mean and sigma_g the unbiased
    (n - 1) group std; A_i = s_i - mu_g without std. A group of one, or a group whose scores
    are all equal, gets exactly 0. A_i is broadcast over the valid tokens of row i.
    ``returns`` equals ``advantages`` (as in verl: there is no critic to regress).
    """
    s = _float_scores(scores)
    inv, counts, mean, constant = _group_stats(s, group_ids)
    centred = s - mean[inv]
    if norm_by_std:
        sq = s.new_zeros(counts.numel()).index_add_(0, inv, centred**2)
        std = (sq / (counts - 1).clamp_min(1.0)).sqrt()
        adv = centred / (std[inv] + eps)
    else:
        adv = centred
    adv = torch.where(constant[inv], torch.zeros_like(adv), adv)
    out = _broadcast(adv, mask)
    return out, out.clone()


@torch.no_grad()
def rloo(
    scores: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE leave-one-out advantage.

    scores: (B,), group_ids: (B,) int, mask: (B, T) -> (advantages, returns), both (B, T).
    A_i = s_i - (sum_g - s_i) / (n_g - 1), i.e. minus the mean of the other n_g - 1 responses.
    A group of one (no other response) or of all-equal scores gets exactly 0.
    ``returns`` equals ``advantages``.
    """
    s = _float_scores(scores)
    inv, counts, mean, constant = _group_stats(s, group_ids)
    n = counts[inv]
    others = (mean[inv] * n - s) / (n - 1).clamp_min(1.0)
    adv = torch.where(constant[inv] | (n < 2), torch.zeros_like(s), s - others)
    out = _broadcast(adv, mask)
    return out, out.clone()


def _discounted_returns(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Backward discounted return that restarts after every masked token.

    token_rewards: (B, T), mask: (B, T) -> G (B, T), 0 on masked tokens.
    For t = T-1 .. 0: R <- r_t + gamma R; G_t = R; R <- R m_t.
    """
    m = as_float_mask(mask, token_rewards)
    running = token_rewards.new_zeros(token_rewards.shape[0])
    out = torch.zeros_like(token_rewards)
    for t in reversed(range(token_rewards.shape[1])):
        running = token_rewards[:, t] + gamma * running
        out[:, t] = running
        running = running * m[:, t]
    return out * m


@torch.no_grad()
def reinforce_pp(
    token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted token returns, whitened over the whole batch.

    token_rewards: (B, T), mask: (B, T) -> (advantages, returns), both (B, T).
    Backward over t: R <- r_t + gamma R; G_t = R; R <- R m_t (so the return restarts after a
    masked token: rewards after a masked gap do not reach tokens before it).
    returns = G on valid tokens; advantages = whiten(G) with the mean and unbiased variance of
    all valid tokens of the batch. Rewards sitting on masked tokens never reach valid ones.
    """
    g = _discounted_returns(token_rewards, mask, gamma)
    return masked_whiten(g, mask), g


def _last_valid_onehot(mask: torch.Tensor) -> torch.Tensor:
    """One-hot of each row's last valid token (all zeros for a row without valid tokens).

    mask: (B, T) -> (B, T) bool.
    """
    m = mask.long()
    return (m.cumsum(-1) == m.sum(-1, keepdim=True)) & m.bool()


@torch.no_grad()
def reinforce_pp_baseline(
    token_rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline (verl's ``reinforce_plus_plus_baseline``).

    token_rewards: (B, T), group_ids: (B,) int, mask: (B, T) -> (advantages, returns), (B, T).
    1. s_i = sum_t r_it m_it (sequence score); mu_g = mean of s over the group of i
       (including i itself, so a group of one is centred to 0).
    2. r'_it = r_it m_it - mu_g [t = last valid token of i]: the baseline is subtracted where
       the outcome reward sits; per-token rewards (e.g. KL penalties) keep their places.
    3. returns/advantages = ``reinforce_pp(r', mask, gamma)`` (discounted returns, whitened).
    With outcome-only rewards this is exactly "score minus group mean on the last valid token,
    then discounted returns, then whitened"; with gamma = 1 every valid token (before any
    masked gap) gets s_i - mu_g before whitening, as in verl.
    """
    m = as_float_mask(mask, token_rewards)
    scores = _float_scores(masked_sum(token_rewards, m, dim=-1))
    inv, _, mean, _ = _group_stats(scores, group_ids)
    last = _last_valid_onehot(mask).to(token_rewards.dtype)
    shaped = torch.where(m.bool(), token_rewards, torch.zeros_like(token_rewards))
    shaped = shaped - last * mean[inv][:, None]
    return reinforce_pp(shaped, mask, gamma)


@torch.no_grad()
def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float | torch.Tensor,
    whiten: bool = True,
    group=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over valid tokens only.

    token_rewards: (B, T), values: (B, T), mask: (B, T), lam: float or (B,) one lambda per sequence
    (VAPO's length-adaptive lambda) -> (advantages, returns), both (B, T).
    whiten: False returns the raw A; group: a torch.distributed process group whose ranks'
    valid tokens give the whitening statistics (see ``masked_whiten``).
    Walking back over valid tokens (masked tokens are skipped: V_next and A_next carry over
    them, and their rewards/values are ignored; after the last valid token V_next = A_next = 0):
      delta_t = r_t + gamma V_next - V_t;  A_t = delta_t + gamma lam A_next.
    returns = A + V (before whitening); advantages = whiten(A) over all valid tokens.
    A sequence with masked tokens in the middle gives the same result as the same sequence
    with those tokens removed.
    """
    m = as_float_mask(mask, token_rewards)
    valid = m.bool()
    r = torch.where(valid, token_rewards, torch.zeros_like(token_rewards))
    v = torch.where(valid, values.to(r.dtype), torch.zeros_like(r))
    next_v = r.new_zeros(r.shape[0])
    next_a = r.new_zeros(r.shape[0])
    adv = torch.zeros_like(r)
    lam = torch.as_tensor(lam, dtype=r.dtype, device=r.device).expand(r.shape[0])
    for t in reversed(range(r.shape[1])):
        a = r[:, t] + gamma * next_v - v[:, t] + gamma * lam * next_a
        ok = valid[:, t]
        adv[:, t] = torch.where(ok, a, torch.zeros_like(a))
        next_v = torch.where(ok, v[:, t], next_v)
        next_a = torch.where(ok, a, next_a)
    returns = (adv + v) * m
    return (masked_whiten(adv, m, group=group) if whiten else adv * m), returns


def length_adaptive_lambda(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """VAPO's length-adaptive GAE lambda for the policy: lam = 1 - 1 / (alpha * l), clamped to [0, 1].

    lengths: (B,) valid response tokens l -> (B,). Long responses get lam near 1 (low bias: the outcome
    reward reaches their early tokens), short ones a smaller lam; l <= 1/alpha gives 0 (one-step TD).
    """
    if alpha <= 0:
        raise ValueError(f"length-adaptive alpha must be > 0, got {alpha}")
    length = lengths.to(torch.float32).clamp_min(1.0)
    return (1.0 - 1.0 / (alpha * length)).clamp(0.0, 1.0)


@torch.no_grad()
def decoupled_gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam_actor: float | torch.Tensor,
    lam_critic: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """VAPO's decoupled GAE: the policy's advantages with ``lam_actor`` (a float or (B,) per sequence),
    the critic's regression targets with ``lam_critic`` (VAPO: 1.0, unbiased Monte-Carlo returns).

    token_rewards, values, mask: (B, T) -> (advantages, returns), both (B, T), 0 on masked tokens;
    advantages are raw (not whitened): the GAE advantages of lam_actor; returns = A_critic + V.
    """
    adv_critic, returns = gae(token_rewards, values, mask, gamma, lam_critic, whiten=False)
    same = not isinstance(lam_actor, torch.Tensor) and lam_actor == lam_critic
    adv = adv_critic if same else gae(token_rewards, values, mask, gamma, lam_actor, whiten=False)[0]
    return adv, returns


def _need(name: str, what: str, value):
    """Raise a clear error when an estimator's required input is missing; return it otherwise."""
    if value is None:
        raise ValueError(f"advantage estimator {name!r} needs {what}")
    return value


def _entry(name: str):
    """Build the uniform registry entry for estimator ``name`` (see module docstring)."""

    def run(token_rewards, mask, *, scores=None, group_ids=None, values=None, gamma=1.0, lam=1.0, norm_by_std=True,
            eps=1e-6, whiten=True, group=None, lam_critic=None, length_alpha=None):
        """token_rewards: (B, T), mask: (B, T) [, scores (B,), group_ids (B,), values (B, T)] -> (adv, ret) (B, T).
        gae/vapo: lam_critic (None -> lam) for the returns, and with length_alpha the actor's lambda per
        sequence of length l is 1 - 1/(length_alpha l) (VAPO's decoupled, length-adaptive GAE)."""
        if name in ("grpo", "drgrpo", "rloo"):
            ids = _need(name, "group_ids", group_ids)
            if scores is None:
                scores = masked_sum(token_rewards, mask, dim=-1)
            if name == "rloo":
                return rloo(scores, ids, mask)
            return grpo(scores, ids, mask, norm_by_std=norm_by_std and name == "grpo", eps=eps)
        if name == "reinforce_plus_plus":
            return reinforce_pp(token_rewards, mask, gamma)
        if name == "reinforce_plus_plus_baseline":
            return reinforce_pp_baseline(token_rewards, _need(name, "group_ids", group_ids), mask, gamma)
        values = _need(name, "values (a critic)", values)
        if name == "vapo":  # the paper's values where the caller gives none
            lam_critic = 1.0 if lam_critic is None else lam_critic
            length_alpha = 0.05 if length_alpha is None else length_alpha
        if lam_critic is None and length_alpha is None:
            return gae(token_rewards, values, mask, gamma, lam, whiten=whiten, group=group)
        lam_actor = lam if length_alpha is None else length_adaptive_lambda(as_float_mask(mask, token_rewards).sum(-1),
                                                                            length_alpha)
        adv, ret = decoupled_gae(token_rewards, values, mask, gamma, lam_actor, lam if lam_critic is None else lam_critic)
        return (masked_whiten(adv, mask, group=group) if whiten else adv), ret

    run.__name__ = f"advantages_{name}"
    return run


ADVANTAGE_ESTIMATORS = {
    name: _entry(name)
    for name in ("grpo", "drgrpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae", "vapo")
}


def compute_advantages(estimator: str, token_rewards: torch.Tensor, mask: torch.Tensor, **kwargs):
    """Run the estimator registered as ``estimator`` (see ``ADVANTAGE_ESTIMATORS``).

    token_rewards: (B, T), mask: (B, T), kwargs: group_ids (B,), values (B, T), gamma, lam,
    norm_by_std, eps -> (advantages, returns), both (B, T).
    """
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {estimator!r}; choose from {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[estimator](token_rewards, mask, **kwargs)


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
    token_rewards[torch.arange(len(scores), device=mask.device), last] = scores.to(mask.dtype)
    return token_rewards * mask


def zero_std_groups(scores: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(G,) group ids whose scores are all equal (no learning signal for group-relative methods)."""
    ids = torch.unique(group_ids)
    flat = [g for g in ids.tolist() if float(scores[group_ids == g].std(unbiased=False)) <= eps]
    return torch.tensor(flat, dtype=torch.long, device=group_ids.device)
