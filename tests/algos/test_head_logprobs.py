"""The fused head (product + log-softmax in one autograd function, `algos.head_logprobs`) gives the numbers of the
checkpointed head module under autocast (the general path, `training/lm_head.py`) bit for bit, forward and
backward, and never holds a (C, V) float32 tensor of a whole chunk."""

import math

import pytest
import torch

from ppokit.algos.head_logprobs import KeptCast, block_rows, head_logprobs
from ppokit.algos.logprobs import _chunk_logprobs, _chunk_logprobs_entropy
from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training import lm_head
from ppokit.training.forward import policy_forward
from tests.training.test_lm_head_chunks import make_batch


def general_path(hidden, weight, labels, temperature, entropy, dtype):
    """The checkpointed head module under autocast on one chunk (what lm_head did before the fused path)."""
    head = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    head.weight = weight
    autocast = torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32)

    def one(h, y):
        with autocast:
            logits = head(h)
        return _chunk_logprobs_entropy(logits, y, temperature) if entropy else (_chunk_logprobs(logits, y, temperature), None)

    logp, ent = torch.utils.checkpoint.checkpoint(one, hidden[None], labels[None], use_reentrant=False,
                                                  preserve_rng_state=False, determinism_check="none")
    return logp[0], None if ent is None else ent[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("entropy", [False, True])
def test_fused_head_equals_the_checkpointed_head_bit_for_bit(dtype, temperature, entropy):
    gen = torch.Generator().manual_seed(1)
    n, width, vocab = 37, 24, 3000  # block_rows(3000) = 349: one block; a second case below splits rows
    hidden = torch.randn(n, width, generator=gen, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(vocab, width, generator=gen) * 0.3)
    labels = torch.randint(0, vocab, (n,), generator=gen)
    upstream = torch.randn(n, generator=gen)

    def run(fn):
        hidden.grad, weight.grad = None, None
        logp, ent = fn()
        (logp * upstream).sum().backward()
        return logp.detach(), ent, hidden.grad.clone(), weight.grad.clone()

    want = run(lambda: general_path(hidden, weight, labels, temperature, entropy, dtype))
    got = run(lambda: head_logprobs(hidden, weight, labels, temperature, entropy, dtype, chunk_size=n, workspace={}))
    for name, a, b in zip(("logp", "entropy", "hidden grad", "weight grad"), got, want):
        if b is None:
            assert a is None, name
        else:
            assert a.dtype == b.dtype and torch.equal(a, b), name


def test_rows_split_into_blocks_and_chunks_give_the_same_bits(monkeypatch):
    gen = torch.Generator().manual_seed(2)
    n, width, vocab = 50, 16, 512
    hidden = torch.randn(n, width, generator=gen, requires_grad=True)
    weight = torch.nn.Parameter(torch.randn(vocab, width, generator=gen))
    labels = torch.randint(0, vocab, (n,), generator=gen)

    def run(chunk):
        hidden.grad, weight.grad = None, None
        logp, ent = head_logprobs(hidden, weight, labels, 0.9, True, torch.bfloat16, chunk, workspace={})
        logp.sum().backward()
        return logp.detach(), ent, hidden.grad.clone(), weight.grad.clone()

    whole = run(n)
    monkeypatch.setattr("ppokit.algos.head_logprobs.BLOCK_BYTES", 4 * vocab * 7)  # 7-row blocks
    assert block_rows(vocab) == 7
    blocked = run(n)
    for a, b in zip(whole, blocked):
        assert torch.equal(a, b)
    # chunks of 16 rows: the log-probs row for row; the weight's gradient is each chunk's bf16 product summed in
    # float32 (as the general path's chunks do), so it differs from one product by bf16 rounding
    chunked = run(16)
    assert torch.equal(chunked[0], whole[0]) and torch.equal(chunked[1], whole[1])
    torch.testing.assert_close(chunked[3], whole[3], rtol=0, atol=2**-7 * float(whole[3].abs().max()))


def test_the_workspace_buffer_is_kept_and_reused_across_calls():
    gen = torch.Generator().manual_seed(3)
    weight = torch.nn.Parameter(torch.randn(300, 8, generator=gen))
    workspace = {}
    for n in (20, 12):  # the second call fits in the first's buffer
        hidden = torch.randn(n, 8, generator=gen, requires_grad=True)
        logp, _ = head_logprobs(hidden, weight, torch.zeros(n, dtype=torch.long), workspace=workspace)
        logp.sum().backward()
    (buffer,) = (v for v in workspace.values() if isinstance(v, torch.Tensor))
    assert buffer.numel() == 20 * 300
    assert math.isfinite(float(weight.grad.sum()))


def test_backward_takes_the_forwards_logits_from_the_buffer_unless_another_chunk_wrote_over_them():
    """A chunk's forward then its backward (a micro-batch's usual order) runs three head products, not four; the
    gradients equal those of the path that always recomputes (no workspace) bit for bit, also when a second call's
    forward wrote over the buffer before the first one's backward (which then recomputes)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountedProducts(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.products = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.products += func.overloadpacket is torch.ops.aten.mm
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(6)
    weight = torch.nn.Parameter(torch.randn(300, 8, generator=gen))
    hiddens = [torch.randn(20, 8, generator=gen, requires_grad=True) for _ in range(2)]
    labels = torch.randint(0, 300, (20,), generator=gen)

    def grads(workspace, interleaved):
        for t in (weight, *hiddens):
            t.grad = None
        with CountedProducts() as counted:
            if interleaved:  # both forwards, then both backwards: the first chunk's logits were written over
                outs = [head_logprobs(h, weight, labels, 0.8, workspace=workspace)[0] for h in hiddens]
                for out in reversed(outs):
                    out.sum().backward()
            else:
                for h in hiddens:
                    head_logprobs(h, weight, labels, 0.8, workspace=workspace)[0].sum().backward()
        return [t.grad.clone() for t in (weight, *hiddens)], counted.products

    recomputed, products = grads(None, interleaved=False)
    assert products == 2 * 4  # forward, recompute, input gradient, weight gradient
    kept, products = grads({}, interleaved=False)
    assert products == 2 * 3 and all(torch.equal(a, b) for a, b in zip(kept, recomputed))
    kept, products = grads({}, interleaved=True)
    assert products == 2 * 3 + 1 and all(torch.equal(a, b) for a, b in zip(kept, recomputed))


def test_the_kept_weight_cast_and_gradient_buffer_are_reused_and_a_recast_in_between_is_noticed():
    """bf16 products of float32 weights: the cast and the gradient's product live in kept buffers; two forwards on
    one workspace before their backwards (the second overwrites the first's cast) still give each its own
    gradients, equal to the bits of calls without a workspace."""
    gen = torch.Generator().manual_seed(5)
    weights = [torch.nn.Parameter(torch.randn(300, 8, generator=gen)) for _ in range(2)]
    hiddens = [torch.randn(20, 8, generator=gen, requires_grad=True) for _ in range(2)]
    labels = torch.randint(0, 300, (20,), generator=gen)

    def grads(workspace):
        for t in (*weights, *hiddens):
            t.grad = None
        outs = [head_logprobs(h, w, labels, compute_dtype=torch.bfloat16, workspace=workspace)[0]
                for h, w in zip(hiddens, weights)]  # both forwards first
        for out in reversed(outs):
            out.sum().backward()
        return [t.grad.clone() for t in (*weights, *hiddens)]

    workspace = {}
    want, got = grads(None), grads(workspace)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    kept = {k: v.data_ptr() for k, v in workspace.items() if isinstance(v, torch.Tensor)}
    assert {k[0] for k in kept} >= {"weight", "weight gradient"}
    grads(workspace)
    assert kept == {k: v.data_ptr() for k, v in workspace.items() if isinstance(v, torch.Tensor)}  # reused
    assert all(w.grad.dtype == torch.float32 for w in weights)
    elsewhere = {}  # off the CPU (a meta weight stands for CUDA's) nothing is kept
    KeptCast.of(torch.empty(300, 8, device="meta"), torch.bfloat16, elsewhere)
    assert elsewhere == {}


def test_policy_forward_takes_the_fused_path_and_matches_the_general_one(monkeypatch):
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=0).train()
    batch = make_batch(tok)
    assert lm_head.fusable(model.lm_head, "detached") and not lm_head.fusable(model.lm_head, "grad")

    def run():
        model.zero_grad()
        logp, ent = policy_forward(model, batch, 4, "detached", torch.bfloat16, "cpu", temperature=0.8)
        logp.sum().backward()
        return logp.detach(), ent, {k: p.grad.clone() for k, p in model.named_parameters()}

    calls = []
    monkeypatch.setattr(lm_head, "head_logprobs", lambda *a, **k: calls.append(1) or head_logprobs(*a, **k))
    fused = run()
    assert calls  # the fused function ran
    monkeypatch.setattr(lm_head, "fusable", lambda head, entropy: False)
    general = run()
    assert torch.equal(fused[0], general[0]) and torch.equal(fused[1], general[1])
    for k in general[2]:
        # a head's weight gradient is summed chunk by chunk in float32 on both paths; the tied embedding adds its own
        torch.testing.assert_close(fused[2][k], general[2][k], rtol=0, atol=0, msg=k)


def test_hooked_or_biased_heads_keep_the_general_path():
    head = torch.nn.Linear(4, 10, bias=False)
    assert lm_head.fusable(head, "none")
    handle = head.register_forward_pre_hook(lambda mod, args: None)  # ZeRO-3 gathers a head's weight in such a hook
    assert not lm_head.fusable(head, "none")
    handle.remove()
    assert not lm_head.fusable(torch.nn.Linear(4, 10), "none")
