"""The tied input embedding builds its weight gradient in a kept buffer (`algos.embedding_grad`, switched on by
`training.lm_head.tied_embedding_gradient_kept`): the same bits as `nn.Embedding`'s own backward, the buffer reused
from one backward to the next, and nothing changed where the embedding is not tied to a plain CPU head."""

import contextlib

import pytest
import torch

from ppokit.algos.embedding_grad import kept_grad_embedding
from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training import forward as forward_module
from ppokit.training import lm_head
from ppokit.training.forward import policy_forward
from tests.training.test_lm_head_chunks import make_batch


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_the_kept_gradient_equals_nn_embeddings_over_micro_batches_with_a_tied_head(padding_idx):
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(500, 16, padding_idx=padding_idx)
    ids = torch.randint(0, 500, (4, 40))
    ids[0, :6] = 3  # padding rows get no gradient
    ids[1] = 7  # one row looked up many times: its gradient sums them in order

    def grads(workspace):
        embedding.weight.grad = None
        for mb in (ids[:2], ids[2:]):  # two micro-batches accumulate into .grad
            x = embedding(mb) if workspace is None else kept_grad_embedding(mb, embedding.weight, padding_idx,
                                                                            workspace)
            (torch.tanh(x) @ embedding.weight.t()).logsumexp(-1).sum().backward()  # the tied head
        return embedding.weight.grad.clone()

    workspace = {}
    want, got, again = grads(None), grads(workspace), grads(workspace)
    assert torch.equal(got, want) and torch.equal(again, want)
    if padding_idx is not None:  # the lookup alone gives the padding row nothing, as nn.Embedding's
        weight = torch.nn.Parameter(embedding.weight.detach().clone())
        kept_grad_embedding(ids, weight, padding_idx, {}).sum().backward()
        assert not weight.grad[padding_idx].any() and weight.grad[7].eq(40).all()
    (buffer,) = workspace.values()
    assert buffer.data_ptr() != embedding.weight.grad.data_ptr()  # .grad never is the reused buffer


def test_policy_forward_with_the_kept_embedding_gradient_gives_the_same_bits(monkeypatch):
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=0).train()
    batch = make_batch(tok)
    embedding = model.get_input_embeddings()
    assert embedding.weight is model.lm_head.weight  # tied, as SmolLM2's

    calls = []
    real = lm_head.kept_grad_embedding
    monkeypatch.setattr(lm_head, "kept_grad_embedding", lambda *a: calls.append(1) or real(*a))

    def run():
        model.zero_grad()
        for _ in range(2):  # two micro-batches
            logp, _ = policy_forward(model, batch, 4, "detached", torch.bfloat16, "cpu")
            logp.sum().backward()
        return {k: p.grad.clone() for k, p in model.named_parameters()}

    kept = run()
    assert calls and "forward" not in embedding.__dict__  # it ran, and the module is as it was
    monkeypatch.setattr(forward_module, "tied_embedding_gradient_kept", lambda *a: contextlib.nullcontext())
    plain = run()
    assert all(torch.equal(kept[k], plain[k]) for k in plain)


def test_the_embedding_is_left_alone_when_untied_without_gradient_or_off_the_cpu():
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=0)
    embedding = model.get_input_embeddings()

    def switched(head):
        with lm_head.tied_embedding_gradient_kept(model, head):
            return "forward" in embedding.__dict__

    assert switched(model.lm_head)
    with torch.no_grad():
        assert not switched(model.lm_head)
    assert not switched(torch.nn.Linear(*reversed(embedding.weight.shape), bias=False))  # another head: not tied
    assert not switched(None)
    with torch.device("meta"):  # a weight on another device (CUDA's caching allocator reuses its blocks)
        meta = tiny_causal_lm(tok, seed=0)
    with lm_head.tied_embedding_gradient_kept(meta, meta.lm_head):
        assert "forward" not in meta.get_input_embeddings().__dict__
