"""The PTX loss through the chunked LM head (training/ptx.py): equal to the NLL of the full (B, L, V) logits, and the
head never sees more than `chunk_size` rows at once nor a position that is not a target."""

import torch

from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training.forward import position_ids
from ppokit.training.ptx import ptx_nll, ptx_tensors


def records(tok):
    return [{"_prompt_ids": tok.encode("q: 1+1 ="), "label": "2"},
            {"_prompt_ids": tok.encode("say three words:"), "label": "one two three"},
            {"_prompt_ids": tok.encode("x"), "label": "a long answer of several tokens"}]


def unchunked_nll(model, recs, tok):
    """The mean target-token NLL from the whole logits, the way ptx.py computed it before the chunked head."""
    ids, att, tmask = ptx_tensors(recs, tok)
    logits = model(input_ids=ids, attention_mask=att, position_ids=position_ids(att), use_cache=False).logits
    logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    mask = tmask[:, 1:]
    return -(logp * mask).sum() / mask.sum()


def test_ptx_loss_equals_the_unchunked_one_and_its_gradients_too():
    tok = tiny_tokenizer()
    recs = records(tok)
    model = tiny_causal_lm(tok, arch="qwen2")
    shapes = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: shapes.append(tuple(i[0].shape)))
    chunked = ptx_nll(model, recs, tok, 3, torch.float32, "cpu")
    hook.remove()
    chunked.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    full = unchunked_nll(model, recs, tok)
    full.backward()
    targets = int(ptx_tensors(recs, tok)[2][:, 1:].sum())
    assert torch.allclose(chunked, full, rtol=1e-5, atol=1e-6), (float(chunked), float(full))
    assert all(torch.allclose(grads[n], p.grad, rtol=1e-4, atol=1e-6) for n, p in model.named_parameters())
    # shapes[0]: the model's own call of its head, passed through (head_skipped) on the hidden states; then the
    # chunks of the forward (the recompute in backward repeats them)
    assert shapes[0][:2] == tuple(ptx_tensors(recs, tok)[0].shape)
    forward_rows = [s[1] for s in shapes[1 : 1 + -(-targets // 3)]]
    assert max(forward_rows) <= 3 and sum(forward_rows) == targets  # only target positions, <= chunk_size at once
