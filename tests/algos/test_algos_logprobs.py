"""Chunked token log-probs and entropy: exact values, chunked == unchunked == log_softmax, memory bound."""

import math

import pytest
import torch

from ppokit.algos import entropy_from_logits, token_logprobs


def test_worked_example():
    # logits [0, ln 3] -> probs [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])
    labels = torch.tensor([[1, 0]])
    # ln(3/4) ; ln(1/2)
    torch.testing.assert_close(token_logprobs(logits, labels), torch.tensor([[math.log(0.75), math.log(0.5)]]))
    # entropy: -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623351 ; ln 2 = 0.6931472
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[h, math.log(2.0)]]))
    # temperature 2 on logits [0, 2 ln 3] gives the same [1/4, 3/4]
    hot = torch.tensor([[[0.0, 2 * math.log(3.0)]]])
    torch.testing.assert_close(token_logprobs(hot, torch.tensor([[1]]), temperature=2.0), torch.tensor([[math.log(0.75)]]))
    torch.testing.assert_close(entropy_from_logits(hot, temperature=2.0), torch.tensor([[h]]))


def test_negative_labels_give_zero():
    logits = torch.randn(1, 3, 5)
    out = token_logprobs(logits, torch.tensor([[2, -100, 4]]))
    assert out[0, 1].item() == 0.0
    assert out[0, 0].item() == pytest.approx(torch.log_softmax(logits[0, 0], -1)[2].item(), rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1, 3, 1024])
def test_chunked_equals_reference_values_and_gradients(dtype, chunk):
    g = torch.Generator().manual_seed(1)
    base = (3 * torch.randn(2, 7, 11, generator=g)).to(dtype)
    labels = torch.randint(0, 11, (2, 7), generator=g)
    weights = torch.randn(2, 7, generator=g)

    ref_logits = base.clone().requires_grad_(True)
    ref_lsm = torch.log_softmax(ref_logits.float(), dim=-1)
    ref_lp = ref_lsm.gather(-1, labels[..., None]).squeeze(-1)
    ref_h = -(ref_lsm.exp() * ref_lsm).sum(-1)
    ((ref_lp + ref_h) * weights).sum().backward()

    logits = base.clone().requires_grad_(True)
    lp = token_logprobs(logits, labels, chunk_size=chunk)
    h = entropy_from_logits(logits, chunk_size=chunk)
    assert lp.dtype == torch.float32 and h.dtype == torch.float32
    torch.testing.assert_close(lp, ref_lp.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h, ref_h.detach(), atol=1e-5, rtol=1e-5)
    ((lp + h) * weights).sum().backward()
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # the bf16 grad is rounded to bf16 once
    torch.testing.assert_close(logits.grad.float(), ref_logits.grad.float(), atol=tol, rtol=tol)


def test_nothing_of_vocabulary_size_is_saved_for_backward_but_views_of_the_logits():
    # Checkpointing per chunk: autograd keeps only the (bf16) input chunks, which are views of
    # ``logits`` itself; the float32 upcast and softmax of a chunk are recomputed in backward.
    b, t, v, chunk = 2, 16, 50, 4
    logits = torch.randn(b, t, v).to(torch.bfloat16).requires_grad_(True)
    labels = torch.randint(0, v, (b, t))
    saved = []

    def pack(x):
        saved.append(x)
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        lp = token_logprobs(logits, labels, chunk_size=chunk)
        h = entropy_from_logits(logits, chunk_size=chunk)
    vocab_sized = [x for x in saved if x.dim() == 3 and x.shape[-1] == v]
    assert vocab_sized, "expected the chunk inputs to be saved"
    storage = logits.untyped_storage().data_ptr()
    assert all(x.untyped_storage().data_ptr() == storage for x in vocab_sized)
    (lp.sum() + h.sum()).backward()
    assert logits.grad is not None and logits.grad.shape == logits.shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_one_pass_backward_gives_autograds_bits(dtype, temperature):
    """The log-prob's own backward (one vocabulary pass) equals autograd's gather - logsumexp, values and
    gradients, bit for bit; with the entropy beside it too."""
    from ppokit.algos.logprobs import _chunk_logprobs, _chunk_logprobs_entropy

    g = torch.Generator().manual_seed(0)
    base = (torch.randn(2, 7, 301, generator=g) * 5).to(dtype)
    labels = torch.randint(0, 301, (2, 7), generator=g)
    weights = torch.randn(2, 7, generator=g)

    def autograd_reference(logits):
        x = logits.float() / temperature if temperature != 1.0 else logits.float()
        return x.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)

    results = []
    for fn in (autograd_reference, lambda x: _chunk_logprobs(x, labels, temperature),
               lambda x: _chunk_logprobs_entropy(x, labels, temperature)[0]):
        x = base.clone().requires_grad_()
        y = fn(x)
        (y * weights).sum().backward()
        results.append((y.detach(), x.grad))
    for values, grad in results[1:]:
        assert torch.equal(values, results[0][0]) and torch.equal(grad, results[0][1])
