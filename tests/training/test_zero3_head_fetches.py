"""What the chunked LM head costs under ZeRO-3 (issue 44, item 9), counted on the CPU: under ZeRO-3 every call of the
head module runs DeepSpeed's pre-forward hook, which all-gathers the head's partitioned weight (V x H), and its
post-forward hook releases it. The count of head calls per training forward + backward is therefore the count of
head gathers; docs/scaling.md ("ZeRO-3 and the chunked LM head") turns it into bytes."""

import math

import torch

from ppokit.testing import tiny_causal_lm, tiny_tokenizer
from ppokit.training.batch import build_batch
from ppokit.training.forward import policy_forward


def test_head_calls_per_micro_batch_are_one_pass_through_plus_two_per_chunk():
    tok = tiny_tokenizer()
    model = tiny_causal_lm(tok, arch="qwen2")
    gen = torch.Generator().manual_seed(0)
    responses = [torch.randint(10, 200, (n,), generator=gen).tolist() for n in [5, 9, 12, 7]]
    batch = build_batch([{"src": ["p"]}] * 2, [tok.encode("hi there"), tok.encode("what is 3+4?")], ["p"] * 2,
                        [0, 0, 1, 1], responses, ["length"] * 4, tok)
    calls = {"forward": 0}
    phase = ["forward"]
    model.lm_head.register_forward_pre_hook(lambda m, i: calls.__setitem__(phase[0], calls.get(phase[0], 0) + 1))
    chunk = 8
    logp, _ = policy_forward(model, batch, chunk, "none", torch.float32, "cpu")
    phase[0] = "backward"
    logp.sum().backward()
    chunks = math.ceil(sum(len(r) for r in responses) / chunk)  # 33 response tokens -> 5 chunks of 8
    # forward: the model's own call (passed through: head_skipped, a gather under ZeRO-3 that computes nothing)
    # and one per chunk; backward: each chunk's checkpoint recomputes its head call
    assert calls == {"forward": 1 + chunks, "backward": chunks}
