"""KL estimators, KL-in-reward and the KL coefficient controllers."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ppokit.algos import KL_ALIASES, KL_ESTIMATORS, AdaptiveKL, FixedKL, apply_kl_penalty, kl_penalty
from ppokit.algos.kl import make_kl_controller

LOGP = torch.tensor([[0.5, -0.3, 0.0]])
REF = torch.zeros(1, 3)  # d = 0.5, -0.3, 0


def test_estimators_worked_example():
    torch.testing.assert_close(kl_penalty(LOGP, REF, "k1"), torch.tensor([[0.5, -0.3, 0.0]]))
    torch.testing.assert_close(kl_penalty(LOGP, REF, "abs"), torch.tensor([[0.5, 0.3, 0.0]]))
    # d^2/2: 0.25/2, 0.09/2, 0
    torch.testing.assert_close(kl_penalty(LOGP, REF, "k2"), torch.tensor([[0.125, 0.045, 0.0]]))
    # exp(-d) + d - 1: e^-0.5 - 0.5 = 0.1065307 ; e^0.3 - 1.3 = 0.0498588 ; 1 + 0 - 1 = 0
    k3 = [math.exp(-0.5) - 0.5, math.exp(0.3) - 1.3, 0.0]
    torch.testing.assert_close(kl_penalty(LOGP, REF, "k3"), torch.tensor([k3]))


def test_aliases_and_unknown():
    assert KL_ALIASES == {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "abs", "kl", "mse", "low_var_kl"}
    for alias, name in KL_ALIASES.items():
        torch.testing.assert_close(kl_penalty(LOGP, REF, alias), kl_penalty(LOGP, REF, name))
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_penalty(LOGP, REF, "full")


def test_k3_clamps():
    logp = torch.tensor([[30.0, -30.0]])
    # d = 30 -> clamped to 20: e^-20 + 19 = 19.000000002 -> clamped to 10
    # d = -30 -> -20: e^20 - 21 = 4.85e8 -> 10
    torch.testing.assert_close(kl_penalty(logp, torch.zeros(1, 2), "k3"), torch.tensor([[10.0, 10.0]]))


@settings(deadline=None)
@given(st.floats(-25, 25), st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
def test_k3_is_non_negative(d, dtype):
    # tiny |d| used to round exp(-d) + d - 1 below zero (e.g. d = -7e-5 in float32 gave -6e-8)
    assert kl_penalty(torch.tensor([d], dtype=dtype), torch.zeros(1, dtype=dtype), "k3").item() >= 0.0


def test_k3_zero_at_zero():
    assert kl_penalty(torch.tensor([0.7]), torch.tensor([0.7]), "k3").item() == 0.0


@pytest.mark.parametrize(
    # gradient of each estimator wrt logp at d = +0.5 and d = -0.5:
    # k1: 1, 1 ; abs: sign d ; k2: d ; k3: 1 - exp(-d) = 0.393, -0.649
    "name, grad_pos, grad_neg",
    [
        ("k1", 1.0, 1.0),
        ("abs", 1.0, -1.0),
        ("k2", 0.5, -0.5),
        ("k3", 1 - math.exp(-0.5), 1 - math.exp(0.5)),
    ],
)
def test_estimator_gradients(name, grad_pos, grad_neg):
    logp = torch.tensor([0.5, -0.5], requires_grad=True)
    ref = torch.zeros(2, requires_grad=True)
    kl_penalty(logp, ref, name).sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([grad_pos, grad_neg]))
    assert ref.grad is None  # the reference is a constant


def test_apply_kl_penalty():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    logp = torch.tensor([[0.5, -0.3, 2.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0]])
    new, kl = apply_kl_penalty(rewards, logp, torch.zeros(1, 3), mask, beta=0.1, estimator="k1")
    # kl = 0.5, -0.3, (masked) 0 ; rewards - 0.1 kl = -0.05, 0.03, 1
    torch.testing.assert_close(kl, torch.tensor([[0.5, -0.3, 0.0]]))
    torch.testing.assert_close(new, torch.tensor([[-0.05, 0.03, 1.0]]))
    assert not new.requires_grad and not kl.requires_grad


def test_adaptive_kl_follows_formula():
    ctl = AdaptiveKL(init=0.1, target=6.0, horizon=10000)
    # KL 9: 9/6 - 1 = 0.5 -> clipped 0.2 ; beta = 0.1 * (1 + 0.2*256/10000) = 0.1 * 1.00512 = 0.100512
    assert ctl.update(9.0, 256) == pytest.approx(0.100512, rel=1e-12)
    # KL 3: 3/6 - 1 = -0.5 -> -0.2 ; beta = 0.100512 * (1 - 0.00512) = 0.099997378...
    assert ctl.update(torch.tensor(3.0), 256) == pytest.approx(0.100512 * 0.99488, rel=1e-12)
    # KL 6.6: 0.1 (inside the clip) ; beta *= 1 + 0.1*100/10000 = 1.001
    assert ctl.update(6.6, 100) == pytest.approx(0.100512 * 0.99488 * 1.001, rel=1e-12)
    state = ctl.state_dict()
    other = AdaptiveKL(init=0.5, target=6.0, horizon=10000)
    other.load_state_dict(state)
    assert other.value == ctl.value


def test_fixed_kl_and_factory():
    ctl = FixedKL(0.05)
    assert ctl.update(100.0, 64) == 0.05 and ctl.value == 0.05
    restored = FixedKL(0.0)
    restored.load_state_dict(ctl.state_dict())
    assert restored.value == 0.05
    assert isinstance(make_kl_controller("adaptive", 0.1, 6.0, 10000), AdaptiveKL)
    with pytest.raises(ValueError, match="target_kl"):
        make_kl_controller("adaptive", 0.1)
    with pytest.raises(ValueError, match="unknown KL controller"):
        make_kl_controller("pid", 0.1)
