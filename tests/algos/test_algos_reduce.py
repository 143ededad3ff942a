"""Loss reduction modes and micro-batch / mini-batch gradient equivalence."""

import pytest
import torch

from ppokit.algos import REDUCTIONS, global_denominators, reduce_loss, token_logprobs
from ppokit.algos.policy_loss import vanilla

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # row 2 has no valid token: not a sequence


def test_reduction_modes_worked_example():
    assert set(REDUCTIONS) == {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"}
    # valid values: row0 1, 2 ; row1 4 ; 3 tokens, 2 sequences
    assert reduce_loss(LOSS, MASK, "token-mean").item() == pytest.approx(7 / 3)  # (1+2+4)/3
    assert reduce_loss(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx(2.75)  # (1.5 + 4)/2
    assert reduce_loss(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx(3.5)  # (3 + 4)/2
    # 7 / (2 sequences * C=4) = 0.875
    assert reduce_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_constant=4).item() == pytest.approx(0.875)


def test_reduction_with_global_denominators():
    # numerators over the given global counts: tokens 10, sequences 5
    kw = dict(global_tokens=10, global_seqs=torch.tensor(5))
    assert reduce_loss(LOSS, MASK, "token-mean", **kw).item() == pytest.approx(0.7)  # 7/10
    assert reduce_loss(LOSS, MASK, "seq-mean-token-mean", **kw).item() == pytest.approx(1.1)  # 5.5/5
    assert reduce_loss(LOSS, MASK, "seq-mean-token-sum", **kw).item() == pytest.approx(1.4)  # 7/5
    assert reduce_loss(LOSS, MASK, "seq-mean-token-sum-norm", norm_constant=4, **kw).item() == pytest.approx(0.35)


def test_reduction_errors():
    with pytest.raises(ValueError, match="norm_constant"):
        reduce_loss(LOSS, MASK, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="unknown loss_agg_mode"):
        reduce_loss(LOSS, MASK, "mean")


def test_global_denominators():
    d = global_denominators([MASK, torch.tensor([[1, 1, 1, 1]])])
    # tokens 3 + 4 = 7 ; sequences 2 + 1 = 3
    assert d["tokens"].item() == 7 and d["seqs"].item() == 3


def test_empty_mask_reduces_to_zero_not_nan():
    for mode in REDUCTIONS:
        out = reduce_loss(LOSS, torch.zeros(3, 3), mode, norm_constant=3)
        assert out.item() == 0.0


# --- gradient equivalence: one mini-batch vs its micro-batches with global denominators ---

H, V, T = 4, 7, 6
LENGTHS = [6, 2, 4, 1, 0, 3, 5]  # one row without any valid token


def _batch():
    """A tiny linear 'model' (W: (V, H)) and a mini-batch of 7 sequences, float64."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(V, H, generator=g, dtype=torch.float64)
    x = torch.randn(len(LENGTHS), T, H, generator=g, dtype=torch.float64)
    labels = torch.randint(0, V, (len(LENGTHS), T), generator=g)
    mask = (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).double()
    with torch.no_grad():
        old = token_logprobs(x @ w.T, labels) + 0.3 * torch.randn(len(LENGTHS), T, generator=g, dtype=torch.float64)
    adv = torch.randn(len(LENGTHS), T, generator=g, dtype=torch.float64)
    return w, x, labels, mask, old, adv


def _loss(w, x, labels, mask, old, adv, mode, **kw):
    """Policy loss of rows through the linear model, reduced with ``mode``."""
    logp = token_logprobs(x @ w.T, labels, chunk_size=2)
    per_token, _ = vanilla(logp, old, adv, mask, 0.2, 0.28, clip_ratio_c=3.0)
    return reduce_loss(per_token, mask, mode, norm_constant=8, **kw)


@pytest.mark.parametrize("mode", sorted(REDUCTIONS))
def test_micro_batches_accumulate_to_the_mini_batch_gradient(mode):
    w0, x, labels, mask, old, adv = _batch()
    w_full = w0.clone().requires_grad_(True)
    _loss(w_full, x, labels, mask, old, adv, mode).backward()

    w_micro = w0.clone().requires_grad_(True)
    slices = [slice(0, 2), slice(2, 5), slice(5, 7)]
    # each micro-batch trimmed to its own longest sequence, as a collator would pad it
    widths = [max(max(LENGTHS[s]), 1) for s in slices]
    parts = [(s, wd) for s, wd in zip(slices, widths)]
    den = global_denominators([mask[s, :wd] for s, wd in parts])
    assert den["tokens"].item() == sum(LENGTHS) and den["seqs"].item() == 6
    for s, wd in parts:
        cut = [t[s, :wd] for t in (x, labels, mask, old, adv)]
        loss = _loss(w_micro, *cut, mode, global_tokens=den["tokens"], global_seqs=den["seqs"])
        loss.backward()
    torch.testing.assert_close(w_micro.grad, w_full.grad, atol=1e-6, rtol=0)


def test_local_denominators_would_not_match():
    # sanity check that the equivalence test above is not vacuous
    w0, x, labels, mask, old, adv = _batch()
    w_full = w0.clone().requires_grad_(True)
    _loss(w_full, x, labels, mask, old, adv, "token-mean").backward()
    w_micro = w0.clone().requires_grad_(True)
    for s in (slice(0, 2), slice(2, 7)):
        (_loss(w_micro, x[s], labels[s], mask[s], old[s], adv[s], "token-mean") / 2).backward()
    assert not torch.allclose(w_micro.grad, w_full.grad, atol=1e-6)
