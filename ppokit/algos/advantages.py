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
to its function, registered with ``@estimator(name)``; each has its own signature, and
``compute_advantages(name, ...)`` passes it the inputs its parameters name. ``whiten`` / ``group``
are GAE's (whiten over the valid tokens of every rank of the process group).

Multi-turn rollouts: ``mask`` is the loss mask (the policy's own tokens). Tool results inside a
response are masked tokens *between* valid ones; returns and GAE carry across them (a reward after
a tool call reaches the tokens before it), and the outcome score sits on the last valid token.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

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
    "estimator",
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
    """Backward discounted return over valid tokens only: masked tokens are skipped, the return carries over them.

    token_rewards: (B, T), mask: (B, T) -> G (B, T), 0 on masked tokens.
    For t = T-1 .. 0 with m_t = 1: R <- r_t + gamma R; G_t = R (masked t: R unchanged, r_t ignored). A row
    with masked tokens in the middle (tool results) gives the returns of the same row with them removed.
    """
    m = as_float_mask(mask, token_rewards)
    valid = m.bool()
    running = token_rewards.new_zeros(token_rewards.shape[0])
    out = torch.zeros_like(token_rewards)
    for t in reversed(range(token_rewards.shape[1])):
        step = token_rewards[:, t] + gamma * running
        running = torch.where(valid[:, t], step, running)
        out[:, t] = running
    return out * m


@torch.no_grad()
def reinforce_pp(
    token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted token returns, whitened over the whole batch.

    token_rewards: (B, T), mask: (B, T) -> (advantages, returns), both (B, T).
    Backward over the valid tokens: R <- r_t + gamma R; G_t = R (masked tokens are skipped, so a
    reward after a tool result reaches the model's tokens before it).
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
    then discounted returns, then whitened"; with gamma = 1 every valid token gets s_i - mu_g
    before whitening, as in verl.
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


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {}


def estimator(name: str):
    """Register ``fn`` as the advantage estimator ``name``: ``@estimator("grpo") def grpo(scores, group_ids, mask)``.

    Each estimator declares the inputs it reads by its parameter names (token_rewards, mask, scores, group_ids,
    values, gamma, lam, norm_by_std, eps, whiten, group, lam_critic, length_alpha); ``compute_advantages`` passes
    it exactly those. Adding an estimator is one decorated function.
    """

    def register(fn):
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is registered twice")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return register


def estimator_inputs(name: str) -> tuple[list[str], list[str]]:
    """(required, optional) parameter names of estimator ``name``."""
    params = inspect.signature(ADVANTAGE_ESTIMATORS[name]).parameters.values()
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    return required, [p.name for p in params if p.default is not inspect.Parameter.empty]


estimator("grpo")(grpo)
estimator("rloo")(rloo)
estimator("reinforce_plus_plus")(reinforce_pp)
estimator("reinforce_plus_plus_baseline")(reinforce_pp_baseline)


@estimator("drgrpo")
def drgrpo(scores: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6):
    """Dr.GRPO: GRPO's group-centred score without the std division. Shapes as ``grpo``."""
    return grpo(scores, group_ids, mask, norm_by_std=False, eps=eps)


@estimator("gae")
def gae_estimator(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
                  lam: float = 1.0, whiten: bool = True, group=None, lam_critic: float | None = None,
                  length_alpha: float | None = None):
    """GAE; with lam_critic (None -> lam) for the returns and/or length_alpha (the actor's lambda per sequence of
    length l is 1 - 1/(length_alpha l)), VAPO's decoupled, length-adaptive GAE, whitened as ``whiten`` says.

    token_rewards, values, mask: (B, T) -> (advantages, returns), both (B, T).
    """
    if lam_critic is None and length_alpha is None:
        return gae(token_rewards, values, mask, gamma, lam, whiten=whiten, group=group)
    lam_actor = lam if length_alpha is None else length_adaptive_lambda(as_float_mask(mask, token_rewards).sum(-1),
                                                                        length_alpha)
    adv, ret = decoupled_gae(token_rewards, values, mask, gamma, lam_actor, lam if lam_critic is None else lam_critic)
    return (masked_whiten(adv, mask, group=group) if whiten else adv), ret


@estimator("vapo")
def vapo(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
         lam: float = 1.0, whiten: bool = True, group=None, lam_critic: float | None = None,
         length_alpha: float | None = None):
    """VAPO: ``gae_estimator`` with the paper's critic lambda 1.0 and alpha 0.05 where the caller gives none."""
    return gae_estimator(token_rewards, values, mask, gamma, lam, whiten, group,
                         1.0 if lam_critic is None else lam_critic, 0.05 if length_alpha is None else length_alpha)


_NEEDS = {"group_ids": "group_ids", "values": "values (a critic)", "scores": "scores", "token_rewards": "token_rewards"}


def compute_advantages(name: str, token_rewards: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                       **inputs):
    """Run the estimator registered as ``name`` with the inputs its signature names (others are ignored).

    token_rewards: (B, T), mask: (B, T); inputs: scores (B,) (outcome estimators: when absent, the score of row i
    is sum_t token_rewards[i, t] m[i, t]), group_ids (B,), values (B, T), gamma, lam, norm_by_std, eps, whiten,
    group, lam_critic, length_alpha -> (advantages, returns), both (B, T). A missing required input (or one given
    as None) is an error naming it; a None optional input takes the estimator's default.
    """
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; choose from {sorted(ADVANTAGE_ESTIMATORS)}")
    given = {"token_rewards": token_rewards, "mask": mask, **inputs}
    required, optional = estimator_inputs(name)
    if "scores" in required and given.get("scores") is None and token_rewards is not None and mask is not None:
        given["scores"] = masked_sum(token_rewards, mask, dim=-1)
    missing = [k for k in required if given.get(k) is None]
    if missing:
        raise ValueError(f"advantage estimator {name!r} needs {', '.join(_NEEDS.get(k, k) for k in missing)}")
    call = {k: given[k] for k in required}
    call.update({k: given[k] for k in optional if given.get(k) is not None})
    return ADVANTAGE_ESTIMATORS[name](**call)


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment (B,): 0 up to max_len - buffer, then linearly down to -factor.

    lengths: (B,) response lengths in tokens.
    """
    start = max_len - buffer
    over = (lengths.float() - start).clamp_min(0.0)
    return -factor * (over / max(buffer, 1)).clamp_max(1.0)


def score_to_token_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, R) token rewards with each sequence's score on its last valid token (of a loss mask: the last token the
    model generated, wherever tool results sit before or after it); 0 elsewhere and on rows with no valid token.

    scores: (B,), mask: (B, R) float -> (B, R) of mask's dtype.
    """
    last = _last_valid_onehot(mask)
    return torch.where(last, scores.to(mask.dtype)[:, None], torch.zeros_like(mask))


def zero_std_groups(scores: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(G,) group ids whose scores are all equal (no learning signal for group-relative methods)."""
    ids = torch.unique(group_ids)
    flat = [g for g in ids.tolist() if float(scores[group_ids == g].std(unbiased=False)) <= eps]
    return torch.tensor(flat, dtype=torch.long, device=group_ids.device)
