"""Policy losses (vanilla PPO with dual clip, GSPO, CISPO) and the clipped value loss."""

import math

import pytest
import torch

from ppokit.algos import POLICY_LOSSES, VALUE_LOSSES
from ppokit.algos.policy_loss import cispo, gspo, vanilla
from ppokit.algos.value_loss import clipped

# eps_low = 0.2, eps_high = 0.28 -> clip range [0.8, 1.28]; dual clip c = 2
RHO = [1.5, 0.5, 1.1, 3.0, 0.9, 0.5, 7.0]  # last token is masked
ADV = [1.0, 1.0, -1.0, -2.0, -1.0, -1.0, 5.0]
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])


def _inputs(rho, adv):
    """old_logp = -1 everywhere; logp = ln(rho) - 1 so that exp(logp - old_logp) = rho."""
    old = torch.full((1, len(rho)), -1.0)
    logp = (torch.log(torch.tensor([rho])) - 1.0).requires_grad_(True)
    return logp, old, torch.tensor([adv])


def test_vanilla_worked_example_with_dual_clip():
    logp, old, adv = _inputs(RHO, ADV)
    loss, metrics = vanilla(logp, old, adv, MASK, 0.2, 0.28, clip_ratio_c=2.0)
    # t0 rho 1.5, A 1:  max(-1.5, -1.28) = -1.28            (clip active)
    # t1 rho 0.5, A 1:  max(-0.5, -0.8)  = -0.5
    # t2 rho 1.1, A -1: max(1.1, 1.1)    = 1.1
    # t3 rho 3.0, A -2: max(6, 2.56) = 6 ; dual: min(6, 2*2) = 4   (dual clip bites)
    # t4 rho 0.9, A -1: max(0.9, 0.9)    = 0.9
    # t5 rho 0.5, A -1: max(0.5, 0.8)    = 0.8              (clip active)
    # t6 masked -> 0
    torch.testing.assert_close(loss, torch.tensor([[-1.28, -0.5, 1.1, 4.0, 0.9, 0.8, 0.0]]))
    assert math.isclose(float(metrics["clipfrac"]), 2 / 6, rel_tol=1e-6)
    assert math.isclose(float(metrics["clipfrac_lower"]), 1 / 6, rel_tol=1e-6)
    # approx_kl = mean(old - logp) = -ln(1.5*0.5*1.1*3*0.9*0.5)/6 = -ln(1.11375)/6
    assert math.isclose(float(metrics["approx_kl"]), -math.log(1.11375) / 6, rel_tol=1e-5)
    assert not any(v.requires_grad for v in metrics.values())
    loss.sum().backward()
    # gradient -A rho where the unclipped term is active, 0 where a clip is active
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -0.5, 1.1, 0.0, 0.9, 0.0, 0.0]]))


def test_vanilla_without_dual_clip():
    logp, old, adv = _inputs(RHO, ADV)
    loss, metrics = vanilla(logp, old, adv, MASK, 0.2, 0.28)
    assert loss[0, 3].item() == pytest.approx(6.0)  # -(-2)*3, no cap
    assert float(metrics["clipfrac_lower"]) == 0.0


def test_dual_clip_bites_only_for_negative_advantage():
    rho = [3.0, 3.0, 10.0, 10.0]
    adv = [2.0, -2.0, 0.5, -0.5]
    logp, old, a = _inputs(rho, adv)
    with_c, m = vanilla(logp, old, a, torch.ones(1, 4), 0.2, 0.2, clip_ratio_c=3.0)
    without_c, _ = vanilla(logp, old, a, torch.ones(1, 4), 0.2, 0.2)
    # A > 0: max(-A rho, -A 1.2) = -A 1.2 either way: -2.4, -0.6
    # A < 0: max(-A rho, ...) = 6 and 5 -> capped at -A c = 6 (not above: no bite) and 1.5 (bites)
    torch.testing.assert_close(without_c, torch.tensor([[-2.4, 6.0, -0.6, 5.0]]))
    torch.testing.assert_close(with_c, torch.tensor([[-2.4, 6.0, -0.6, 1.5]]))
    assert float(m["clipfrac_lower"]) == pytest.approx(1 / 4)


def test_dual_clip_constant_must_exceed_one():
    logp, old, adv = _inputs([1.0], [1.0])
    with pytest.raises(ValueError, match="> 1"):
        vanilla(logp, old, adv, torch.ones(1, 1), 0.2, 0.2, clip_ratio_c=0.9)


def test_gspo_worked_example():
    # row 0: log-ratios ln 2 and 0 -> mean ln2/2 -> s = sqrt(2) = 1.41421 ; A = 1
    #        loss = max(-1.41421, -1.28) = -1.28 on both tokens, clip active, no gradient
    # row 1: log-ratios 0.1, -0.1 (+ a masked token with log-ratio 5) -> mean 0 -> s = 1 ; A = -1
    #        loss = max(1, 1) = 1 ; d loss/d logp_t = -A s = 1
    old = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0]])
    logp = torch.tensor([[-1.0 + math.log(2.0), -2.0, 0.0], [-0.9, -1.1, 4.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    loss, metrics = gspo(logp, old, adv, mask, 0.2, 0.28)
    torch.testing.assert_close(loss, torch.tensor([[-1.28, -1.28, 0.0], [1.0, 1.0, 0.0]]))
    assert float(metrics["clipfrac"]) == pytest.approx(2 / 4)
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))


def test_gspo_equals_vanilla_for_one_token_sequences():
    logp, old, adv = _inputs([1.5, 0.7, 1.1], [1.0, -1.0, 2.0])
    logp, old, adv = logp.T.detach(), old.T, adv.T  # three sequences of one token each
    mask = torch.ones(3, 1)
    lg = logp.clone().requires_grad_(True)
    lv = logp.clone().requires_grad_(True)
    loss_g, _ = gspo(lg, old, adv, mask, 0.2, 0.28)
    loss_v, _ = vanilla(lv, old, adv, mask, 0.2, 0.28)
    torch.testing.assert_close(loss_g, loss_v)
    loss_g.sum().backward()
    loss_v.sum().backward()
    torch.testing.assert_close(lg.grad, lv.grad)


def test_cispo_worked_example_and_gradient_only_through_logp():
    # rho 1.5, 0.5, 1.0 -> weights clip to [0.8, 1.28]: 1.28, 0.8, 1.0 ; A = 2, -1, 0.5
    old = torch.full((1, 3), -1.0, requires_grad=True)
    logp = torch.tensor([[math.log(1.5) - 1, math.log(0.5) - 1, -1.0]], requires_grad=True)
    adv = torch.tensor([[2.0, -1.0, 0.5]], requires_grad=True)
    loss, metrics = cispo(logp, old, adv, torch.ones(1, 3), 0.2, 0.28)
    # loss = -w A logp: -1.28*2*(ln1.5 - 1), -0.8*(-1)*(ln0.5 - 1), -1*0.5*(-1)
    expected = [-2.56 * (math.log(1.5) - 1), 0.8 * (math.log(0.5) - 1), 0.5]
    torch.testing.assert_close(loss, torch.tensor([expected]))
    assert float(metrics["clipfrac"]) == pytest.approx(2 / 3)
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.56, 0.8, -0.5]]))  # -clip(rho) A
    assert old.grad is None and adv.grad is None


def test_policy_loss_registry():
    assert set(POLICY_LOSSES) == {"vanilla", "gspo", "cispo"}
    assert set(VALUE_LOSSES) == {"clipped"}


def test_value_loss_worked_example():
    values = torch.tensor([[1.0, 2.0, 0.5, 2.0, 50.0]], requires_grad=True)
    old = torch.tensor([[0.8, 1.0, 0.5, 1.0, 0.0]])
    ret = torch.tensor([[1.5, 0.0, 1.0, 3.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    loss, metrics = clipped(values, old, ret, mask, clip=0.2)
    # t0: Vc = 0.8 + 0.2 = 1.0 ; (1-1.5)^2 = 0.25 both -> 0.125
    # t1: Vc = 1.2 ; (2-0)^2 = 4 vs (1.2-0)^2 = 1.44 -> 0.5*4 = 2
    # t2: Vc = 0.5 ; 0.25 -> 0.125
    # t3: Vc = 1.2 ; (2-3)^2 = 1 vs (1.2-3)^2 = 3.24 -> 1.62 (clipped term active)
    torch.testing.assert_close(loss, torch.tensor([[0.125, 2.0, 0.125, 1.62, 0.0]]))
    assert float(metrics["vf_clipfrac"]) == pytest.approx(1 / 4)
    loss.sum().backward()
    # d/dV 0.5 (V-R)^2 = V - R where unclipped active ; 0 through the clipped V
    torch.testing.assert_close(values.grad, torch.tensor([[-0.5, 2.0, -0.5, 0.0, 0.0]]))
    plain, m = clipped(values, old, ret, mask, clip=None)
    torch.testing.assert_close(plain, torch.tensor([[0.125, 2.0, 0.125, 0.5, 0.0]]))
    assert float(m["vf_clipfrac"]) == 0.0
