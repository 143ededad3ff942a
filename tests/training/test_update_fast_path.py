"""The update's speed levers (length-sorted, trimmed micro-batches; entropy fused into the log-prob
pass) give the loss and gradients of the straightforward path: one untrimmed batch, separate passes."""

import pytest
import torch

from ppokit.algos.logprobs import entropy_from_logits, token_logprobs
from ppokit.algos.policy_loss import POLICY_LOSSES
from ppokit.algos.reduce import reduce_loss
from ppokit.args import load_arguments
from ppokit.models.loading import autocast_context
from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training.actor import actor_loss
from ppokit.training.batch import build_batch
from ppokit.training.forward import response_logits
from ppokit.training.update import LossConfig, length_sorted_chunks, minibatch_denominators


def make_batch(tok):
    gen = torch.Generator().manual_seed(0)
    prompts = [tok.encode("hi"), tok.encode("what is 3+4?"), tok.encode("say something long please")]
    index = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    lengths = [1, 7, 3, 12, 2, 5, 9, 4, 12]
    responses = [torch.randint(10, 200, (n,), generator=gen).tolist() for n in lengths]
    records = [{"src": ["p"]} for _ in prompts]
    batch = build_batch(records, prompts, ["p"] * 3, index, responses, ["length"] * 9, tok)
    batch.advantages = torch.randn(batch.response_mask.shape, generator=gen) * batch.response_mask
    return batch


def straightforward_loss(model, batch, args, compute_dtype):
    """One untrimmed micro-batch, log-probs and (logged) entropy in separate passes: the reference."""
    labels = batch.input_ids[:, batch.prompt_len :]
    with autocast_context(compute_dtype, "cpu"):
        logits = response_logits(model, batch)
    logp = token_logprobs(logits, labels, chunk_size=args.chunk_size)
    entropy = entropy_from_logits(logits.detach(), chunk_size=args.chunk_size)
    mask = batch.response_mask
    pg, _ = POLICY_LOSSES["vanilla"](logp, logp.detach(), batch.advantages, mask, 0.2, 0.2, args.clip_ratio_c)
    tokens, seqs = float(mask.sum()), float(mask.shape[0])
    loss = reduce_loss(pg, mask, args.loss_agg_mode, norm_constant=args.max_dec_len, global_tokens=tokens,
                       global_seqs=seqs)
    ent = reduce_loss(entropy, mask, args.loss_agg_mode, norm_constant=args.max_dec_len, global_tokens=tokens,
                      global_seqs=seqs)
    return loss, float(ent)


@pytest.mark.parametrize("compute_dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_sorted_trimmed_micro_batches_give_the_same_loss_and_gradient(compute_dtype, tol, agg):
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=0)
    batch = make_batch(tok)
    args = load_arguments(None, overrides=dict(rl_algorithm="grpo", rollout_n=3, per_device_train_batch_size=3, chunk_size=5, max_dec_len=12, loss_agg_mode=agg,
                                               clip_range_ratio=0.2))
    ref_loss, ref_entropy = straightforward_loss(model, batch, args, compute_dtype)
    ref_grads = torch.autograd.grad(ref_loss, list(model.parameters()))

    denoms = minibatch_denominators(batch.response_mask)
    micro = length_sorted_chunks(batch.attention_mask, 4)
    assert sorted(i for idx in micro for i in idx) == list(range(len(batch)))
    assert [len(idx) for idx in micro] == [4, 4, 1]
    total, entropy = 0.0, 0.0
    grads = [torch.zeros_like(p) for p in model.parameters()]
    for idx in micro:
        part = batch.select(idx).trimmed()
        loss, metrics = actor_loss(model, part, LossConfig.from_args(args), denoms, compute_dtype, "cpu")
        for g, d in zip(grads, torch.autograd.grad(loss, list(model.parameters()))):
            g += d
        total += float(loss.detach())
        entropy += metrics["actor/entropy"]
    assert total == pytest.approx(float(ref_loss.detach()), rel=tol, abs=tol * 1e-2)
    assert entropy == pytest.approx(ref_entropy, rel=tol)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=tol, atol=tol * float(r.abs().max()) + 1e-7)


def test_length_sorted_chunks_group_rows_of_similar_length():
    mask = torch.zeros(6, 10, dtype=torch.long)
    for row, n in enumerate([9, 2, 7, 3, 10, 1]):
        mask[row, :n] = 1
    assert length_sorted_chunks(mask, 2) == [[5, 1], [3, 2], [0, 4]]
    assert length_sorted_chunks(mask, 16) == [[5, 1, 3, 2, 0, 4]]
