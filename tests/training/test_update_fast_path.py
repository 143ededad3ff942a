"""The update's speed levers (length-sorted, trimmed micro-batches that keep a prompt's rows together; a
shared prompt computed once; entropy fused into the log-prob pass) give the loss and gradients of the
straightforward path: one untrimmed batch, whole rows, separate passes."""

import pytest
import torch

from ppokit.algos.logprobs import entropy_from_logits, token_logprobs
from ppokit.algos.policy_loss import POLICY_LOSSES
from ppokit.algos.reduce import reduce_loss
from ppokit.args import load_arguments
from ppokit.models.loading import autocast_context
from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training import packing
from ppokit.training.actor import actor_loss
from ppokit.training.batch import build_batch
from ppokit.training.forward import full_response_logits, packed_response_logits
from ppokit.training.packing import can_pack, first_fit_decreasing, pack_by_prompt
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


def whole_rows_logits(model, batch):
    """(B, R, V) logits of every response column, padding included, from whole rows."""
    R = batch.response_mask.shape[1]
    positions = (batch.attention_mask.cumsum(-1) - 1).clamp_min(0)
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions,
                logits_to_keep=R + 1, use_cache=False)
    return out.logits[:, :-1]


def straightforward_loss(model, batch, args, compute_dtype):
    """One untrimmed micro-batch, log-probs and (logged) entropy in separate passes: the reference."""
    labels = batch.input_ids[:, batch.prompt_len :]
    with autocast_context(compute_dtype, "cpu"):
        logits = whole_rows_logits(model, batch)
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
    micro = length_sorted_chunks(batch.attention_mask, 4, batch.group_ids)
    assert sorted(i for idx in micro for i in idx) == list(range(len(batch)))
    assert [len(idx) for idx in micro] == [4, 4, 1]
    assert all(can_pack(model, p)
               for p in (batch.select(idx).trimmed() for idx in micro[:2]))
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


def test_length_sorted_chunks_keep_a_prompts_rows_together():
    mask = torch.zeros(6, 10, dtype=torch.long)
    for row, n in enumerate([9, 2, 7, 3, 10, 1]):
        mask[row, :n] = 1
    groups = torch.tensor([7, 7, 3, 3, 5, 5])
    # groups by their longest row (3: 7, 7: 9, 5: 10), rows by length within a group
    assert length_sorted_chunks(mask, 2, groups) == [[3, 2], [1, 0], [5, 4]]
    assert length_sorted_chunks(mask, 4, groups) == [[3, 2, 1, 0], [5, 4]]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_rows_packed_by_prompt_give_the_logits_and_gradients_of_whole_rows(arch):
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, arch=arch, seed=0)
    model.train()
    batch = make_batch(tok)
    batch.response_mask[4, 1:] = 0  # a row with one response token
    assert can_pack(model, batch)
    reference = whole_rows_logits(model, batch)[batch.response_mask.bool()]  # (N, V) real tokens
    full = full_response_logits(model, batch)
    packed = packed_response_logits(model, batch)
    assert packed.shape == full.shape == reference.shape
    torch.testing.assert_close(full, reference)
    torch.testing.assert_close(packed, full, rtol=1e-5, atol=1e-5)
    params = list(model.parameters())
    weights = torch.randn(full.shape, generator=torch.Generator().manual_seed(1))
    for g, r in zip(torch.autograd.grad((packed * weights).sum(), params),
                    torch.autograd.grad((full * weights).sum(), params)):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4 * float(r.abs().max()) + 1e-7)


BY_HAND = dict(  # two rows of prompt [5, 6] (one left-padded column), one of prompt [7, 8, 9]
    input_ids=torch.tensor([[0, 5, 6, 11, 12, 0], [0, 5, 6, 13, 0, 0], [7, 8, 9, 14, 15, 16]]),
    attention_mask=torch.tensor([[0, 1, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]),
    response_mask=torch.tensor([[1.0, 1, 0], [1, 0, 0], [1, 1, 1]]),
    prompt_len=3,
)


def test_packing_layout_by_hand_two_groups_in_one_row():
    packed = pack_by_prompt(**BY_HAND, row_target=11)
    # groups of 6 ([7, 8, 9] + 3) and 5 ([5, 6] + 2 + 1) tokens, largest first, into one row of 11
    assert packed.input_ids.tolist() == [[7, 8, 9, 14, 15, 16, 5, 6, 11, 12, 13]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 2]]
    assert packed.keep == 9  # from the first prompt's last token (column 2) on
    assert packed.logit_index.tolist() == [[5, 6, 0], [5, 0, 0], [0, 1, 2]]
    m = packed.attention_mask[0, 0].int().tolist()
    assert m[3] == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]  # [7, 8, 9]'s response: its prompt and itself
    assert m[6] == [0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]  # prompt [5, 6] starts afresh
    assert m[9] == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0]  # response 1, token 2: its prompt and its first token
    assert m[10] == [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1]  # response 2: its prompt and itself, not response 1


def test_packing_layout_by_hand_one_group_per_row():
    packed = pack_by_prompt(**BY_HAND)  # rows as long as the longest group: 6 + 5 does not fit in 6
    assert packed.input_ids.tolist() == [[7, 8, 9, 14, 15, 16], [5, 6, 11, 12, 13, 0]]
    assert packed.keep == 5  # from column 1, the shorter prompt's last token
    assert packed.logit_index.tolist() == [[5, 6, 0], [5, 0, 0], [1, 2, 3]]
    assert packed.attention_mask[1, 0, 5].int().tolist() == [0, 0, 0, 0, 0, 1]  # padding: only itself


def test_first_fit_decreasing():
    assert first_fit_decreasing([5, 9, 3, 7, 4], 12) == [[1, 2], [3, 0], [4]]
    assert first_fit_decreasing([5, 5], 5) == [[0], [1]]


@pytest.mark.parametrize("row_target", [0, 20, 256])
def test_any_packing_gives_the_logits_of_whole_rows(row_target):
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=0)
    batch = make_batch(tok)
    reference = whole_rows_logits(model, batch)[batch.response_mask.bool()]
    packed = pack_by_prompt(batch.input_ids, batch.attention_mask, batch.response_mask, batch.prompt_len, row_target)
    out = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask, position_ids=packed.position_ids,
                logits_to_keep=packed.keep, use_cache=False).logits
    logits = out.reshape(-1, out.shape[-1])[packed.logit_index[batch.response_mask.bool()]]
    torch.testing.assert_close(logits, reference, rtol=1e-5, atol=1e-5)


def test_rows_are_not_packed_when_it_saves_nothing_or_the_attention_would_ignore_the_mask_or_rows_get_long():
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, seed=0)
    batch = make_batch(tok)
    assert can_pack(model, batch)
    three = batch.select([0, 3, 6])  # three different prompts
    assert not can_pack(model, three)
    model.config._attn_implementation = "eager"
    assert not can_pack(model, batch)
    model.config._attn_implementation = "sdpa"
    model.config.sliding_window = 4
    assert not can_pack(model, batch)
    model.config.sliding_window = None
    assert can_pack(model, batch)
    with pytest.MonkeyPatch.context() as patch:  # a packed row would be longer than a dense mask is worth
        patch.setattr(packing, "MAX_PACKED_LEN", batch.prompt_len + 20)
        assert not can_pack(model, batch)  # the longest prompt's responses: 9 + 4 + 12 = 25 tokens


def test_packed_attention_equals_sdpa_with_repeated_heads_and_its_gradients():
    from ppokit.training.packing import packed_attention

    torch.manual_seed(0)
    g, h, h_kv, length, d = 2, 6, 2, 7, 8
    q = torch.randn(g, h, length, d, requires_grad=True)
    k = torch.randn(g, h_kv, length, d, requires_grad=True)
    v = torch.randn(g, h_kv, length, d, requires_grad=True)
    mask = torch.ones(length, length, dtype=torch.bool).tril().repeat(g, 1, 1, 1)
    mask[1, :, 4:, 1:3] = False  # a block the later tokens do not see, as packed rows have
    ours, _ = packed_attention(None, q, k, v, mask, scaling=d ** -0.5)
    expanded = [t.repeat_interleave(h // h_kv, dim=1) for t in (k, v)]
    theirs = torch.nn.functional.scaled_dot_product_attention(q, *expanded, attn_mask=mask).transpose(1, 2)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    upstream = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad(ours, (q, k, v), upstream), torch.autograd.grad(theirs, (q, k, v), upstream)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_packed_cpu_forward_runs_packed_attention_and_restores_sdpa(monkeypatch):
    model = tiny_causal_lm(tiny_tokenizer(), seed=1)
    calls = []
    real = packing.packed_attention
    monkeypatch.setattr(packing, "packed_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    with packing.packed_attention_on(model):
        model(input_ids=torch.tensor([[1, 2, 3]]), attention_mask=torch.ones(1, 1, 3, 3, dtype=torch.bool).tril())
    assert calls and model.config._attn_implementation == "sdpa"
    model.gradient_checkpointing_enable()
    with packing.packed_attention_on(model):  # recomputation in backward would run SDPA: left alone
        assert model.config._attn_implementation == "sdpa"
