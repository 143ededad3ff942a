import math

import pytest
import torch

from ppokit.engine import make_lr_lambda


def values(fn, steps):
    return [fn(k) for k in steps]


def test_constant_and_constant_with_warmup():
    assert values(make_lr_lambda("constant", 10, 3, 1e-5), [0, 5, 20]) == [1.0, 1.0, 1.0]
    assert values(make_lr_lambda("constant_with_warmup", 10, 4, 1e-5), [0, 1, 2, 4, 9]) == [0.0, 0.25, 0.5, 1.0, 1.0]


def test_linear_warmup_then_decay_to_zero():
    fn = make_lr_lambda("linear", 10, 2, 1e-5)
    # warmup k/2, then (10 - k) / 8
    assert values(fn, [0, 1, 2, 6, 10, 12]) == pytest.approx([0.0, 0.5, 1.0, 0.5, 0.0, 0.0])


def test_cosine_with_warmup():
    fn = make_lr_lambda("cosine", 12, 2, 1e-5)
    # after warmup: 0.5 * (1 + cos(pi * (k - 2) / 10))
    assert fn(1) == pytest.approx(0.5)
    assert fn(2) == pytest.approx(1.0)
    assert fn(7) == pytest.approx(0.5)
    assert fn(4) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.2)))
    assert fn(12) == pytest.approx(0.0, abs=1e-12)


def test_polynomial_decays_to_lr_end():
    fn = make_lr_lambda("polynomial", 10, 0, 1e-3, lr_end=1e-4, power=2.0)
    # ((lr - end) * (1 - k/10)^2 + end) / lr
    assert fn(0) == pytest.approx(1.0)
    assert fn(5) == pytest.approx(((1e-3 - 1e-4) * 0.25 + 1e-4) / 1e-3)
    assert fn(11) == pytest.approx(0.1)


def test_min_lr_uses_paddlenlp_annealing_schedulers():
    lr, min_lr = 1e-4, 1e-5
    linear = make_lr_lambda("linear", 10, 2, lr, min_lr)
    # PaddleNLP LinearAnnealingWithWarmupDecay: lr*k/w for k <= w, then min + (1 - (k-w)/(T-w)) (lr - min)
    assert [linear(k) * lr for k in (0, 1, 2)] == pytest.approx([0.0, 5e-5, 1e-4])
    assert linear(6) * lr == pytest.approx(1e-5 + 0.5 * 9e-5)
    assert linear(10) * lr == pytest.approx(1e-5)
    assert linear(50) * lr == pytest.approx(1e-5)
    cosine = make_lr_lambda("cosine", 10, 0, lr, min_lr, decay_steps=20)
    # no warmup; decay over decay_steps=20: min + 0.5 (1 + cos(pi k/20)) (lr - min)
    assert cosine(0) * lr == pytest.approx(1e-4)
    assert cosine(10) * lr == pytest.approx(1e-5 + 0.5 * 9e-5)
    assert cosine(25) * lr == pytest.approx(1e-5)


def test_min_lr_is_ignored_for_other_kinds():
    assert make_lr_lambda("constant", 10, 0, 1e-4, 1e-5)(9) == 1.0


def test_bad_arguments_are_explained():
    with pytest.raises(ValueError, match="not supported"):
        make_lr_lambda("inverse_sqrt", 10, 0, 1e-5)
    with pytest.raises(ValueError, match="at least one optimizer step"):
        make_lr_lambda("linear", 0, 0, 1e-5)


def test_scheduler_drives_the_optimizer_lr():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, make_lr_lambda("linear", total_steps=4, warmup_steps=2, lr=0.1))
    seen = []
    for _ in range(5):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.0, 0.05, 0.1, 0.05, 0.0])
