"""The LM head runs chunk_size tokens at a time on the response tokens' hidden states: no (tokens x vocabulary)
logits of a whole micro-batch are ever built, and log-probs, entropies and gradients equal the unchunked ones."""

import pytest
import torch

from ppokit.algos.logprobs import entropy_from_logits, token_logprobs
from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training.batch import build_batch
from ppokit.training.forward import policy_forward
from ppokit.training.lm_head import split_head


def make_batch(tok):
    gen = torch.Generator().manual_seed(0)
    prompts = [tok.encode("hi"), tok.encode("what is 3+4?")]
    index = [0, 0, 1, 1, 1]
    responses = [torch.randint(10, 200, (n,), generator=gen).tolist() for n in [3, 9, 12, 5, 7]]
    return build_batch([{"src": ["p"]}] * 2, prompts, ["p"] * 2, index, responses, ["length"] * 5, tok)


def unchunked(model, batch, temperature):
    """(log-probs, entropies) (B, R) from the full (B, R, V) logits of whole rows (the straightforward path)."""
    R = batch.response_mask.shape[1]
    positions = (batch.attention_mask.cumsum(-1) - 1).clamp_min(0)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions,
                   logits_to_keep=R + 1, use_cache=False).logits[:, :-1]
    labels = batch.input_ids[:, batch.prompt_len :]
    mask = batch.response_mask
    return (token_logprobs(logits, labels, temperature=temperature) * mask,
            entropy_from_logits(logits, temperature=temperature) * mask)


def head_outputs(model):
    """Shapes of what the LM head returns while recording (passed-through calls return the hidden states)."""
    shapes = []
    handle = split_head(model).register_forward_hook(lambda mod, inp, out: shapes.append(tuple(out.shape)))
    return shapes, handle


@pytest.mark.parametrize("entropy", ["grad", "detached", "none"])
def test_chunked_head_equals_the_full_logits_and_never_builds_more_than_a_chunk(entropy):
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=0).train()
    batch = make_batch(tok)
    vocab, chunk = model.config.vocab_size, 4
    shapes, handle = head_outputs(model)
    try:
        logp, ent = policy_forward(model, batch, chunk, entropy, torch.float32, "cpu", temperature=0.7)
        loss = logp.sum() + (ent.sum() if entropy == "grad" else 0)
        loss.backward()  # the checkpointed chunks run the head again, a chunk at a time
    finally:
        handle.remove()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    want_logp, want_ent = unchunked(model, batch, 0.7)
    (want_logp.sum() + (want_ent.sum() if entropy == "grad" else 0)).backward()

    logits_rows = [s[-2] for s in shapes if s[-1] == vocab]
    tokens = int(batch.response_mask.sum())
    assert logits_rows and max(logits_rows) <= chunk < tokens  # never more than a chunk of logits at once
    assert sum(logits_rows) >= tokens  # every response token went through the head
    torch.testing.assert_close(logp, want_logp, atol=1e-6, rtol=0)
    if entropy != "none":
        torch.testing.assert_close(ent, want_ent, atol=1e-5, rtol=0)
    for k, p in model.named_parameters():
        # float32 sums in another order (chunks vs one matmul): a few ulps of the tensor's largest entry, which on
        # AMX CPUs exceeds a fixed 1e-6 for small entries of large gradients (seen: 2.9e-6 beside entries of 8.3)
        scale = float(p.grad.abs().max())
        torch.testing.assert_close(grads[k], p.grad, atol=1e-6 * max(1.0, scale), rtol=1e-5, msg=k)


def test_families_with_work_after_the_head_keep_the_models_own_logits():
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=0)
    assert split_head(model) is model.lm_head
    model.config.final_logit_softcapping = 30.0  # e.g. Gemma 2: tanh soft-capping after the head
    assert split_head(model) is None
