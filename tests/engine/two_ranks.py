"""Run by test_engine_two_ranks.py under torchrun with 2 processes: each rank backs up half of a
mini-batch whose loss is normalised by the global token count; the update must equal one big batch."""

import copy
import sys

import torch

from ppokit.engine import build_engine, deepspeed_config, init_distributed, micro_batch_backward
from ppokit.models.weights import gathered
from ppokit.testing import tiny_causal_lm, tiny_tokenizer


def token_loss(model, ids, mask, denominator):
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1].float()
    logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return -(logp * mask[:, 1:]).sum() / denominator


def main(stage: int) -> None:
    dist = init_distributed()
    model = tiny_causal_lm(tiny_tokenizer(), seed=0)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, 200, (4, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[3, 5:] = 0
    tokens = mask[:, 1:].sum()
    reference = copy.deepcopy(model)
    config = deepspeed_config(zero_stage=stage, offload_optimizer=False, micro_batch_size=1, grad_accum=2,
                              world_size=dist.world_size, lr=1.0, eps=1.0, max_grad_norm=0.0, device="cpu")
    engine = build_engine(model, config)
    rows = [2 * dist.rank, 2 * dist.rank + 1]  # this rank's half, as two micro-batches
    for k, row in enumerate(rows):
        part = slice(row, row + 1)
        micro_batch_backward(engine, token_loss(engine, ids[part], mask[part], tokens), last=k == 1)
    opt = torch.optim.AdamW(reference.parameters(), lr=1.0, eps=1.0, weight_decay=0.0)
    token_loss(reference, ids, mask, tokens).backward()
    opt.step()
    with gathered(engine.module):
        worst = max((p.detach() - q.detach()).abs().max().item()
                    for p, q in zip(engine.module.parameters(), reference.parameters()))
    print(f"rank {dist.rank} stage {stage} max difference {worst:.3g}", flush=True)
    sys.exit(0 if worst < 1e-5 else 1)


if __name__ == "__main__":
    main(int(sys.argv[1]))
