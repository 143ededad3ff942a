"""Masked mean / var / whiten against hand-computed values."""

import math

import torch

from ppokit.algos import masked_mean, masked_sum, masked_var, masked_whiten

NAN = float("nan")


def test_masked_mean_ignores_masked_values_even_nan():
    x = torch.tensor([[1.0, 2.0, NAN], [4.0, 100.0, 100.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # valid values 1, 2, 4 -> (1 + 2 + 4) / 3 = 7/3
    assert math.isclose(masked_mean(x, m).item(), 7 / 3, rel_tol=1e-6)
    # per row: (1 + 2)/2 = 1.5 ; 4/1 = 4
    torch.testing.assert_close(masked_mean(x, m, dim=-1), torch.tensor([1.5, 4.0]))
    # sum: 1 + 2 + 4 = 7
    assert masked_sum(x, m).item() == 7.0


def test_masked_mean_of_empty_row_is_zero_not_nan():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    m = torch.tensor([[1, 1], [0, 0]])
    torch.testing.assert_close(masked_mean(x, m, dim=-1), torch.tensor([1.5, 0.0]))
    assert masked_mean(x, torch.zeros_like(m)).item() == 0.0


def test_masked_var_unbiased_and_biased():
    x = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    # values 1, 2, 4; mean 7/3; squared deviations 16/9 + 1/9 + 25/9 = 42/9 = 14/3
    # unbiased: (14/3) / 2 = 7/3 ; biased: (14/3) / 3 = 14/9
    assert math.isclose(masked_var(x, m).item(), 7 / 3, rel_tol=1e-6)
    assert math.isclose(masked_var(x, m, unbiased=False).item(), 14 / 9, rel_tol=1e-6)


def test_masked_var_of_one_value_is_zero():
    x = torch.tensor([[5.0, 1.0]])
    m = torch.tensor([[1, 0]])
    assert masked_var(x, m).item() == 0.0


def test_masked_whiten():
    x = torch.tensor([[1.0, 3.0, 77.0], [5.0, -8.0, -8.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # valid 1, 3, 5: mean 3, unbiased var (4 + 0 + 4) / 2 = 4, std 2 -> -1, 0, 1 ; masked -> 0
    expected = torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(masked_whiten(x, m), expected, atol=1e-6, rtol=0)
    # shift_mean=False: (x - 3)/2 + 3 -> 2, 3, 4
    expected = torch.tensor([[2.0, 3.0, 0.0], [4.0, 0.0, 0.0]])
    torch.testing.assert_close(masked_whiten(x, m, shift_mean=False), expected, atol=1e-6, rtol=0)
