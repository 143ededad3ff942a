"""PaddleNLP's PTX auxiliary loss: `ptx_coeff` × token NLL of supervised targets, added to actor updates."""

from __future__ import annotations

import torch

from ppokit.algos.logprobs import token_logprobs
from ppokit.training.forward import autocast, position_ids


def ptx_tensors(records: list[dict], tokenizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, target_mask), each (B, L): rendered prompt then the label + EOS, right-padded."""
    rows, targets = [], []
    for r in records:
        prompt = r["_prompt_ids"]
        target = tokenizer(r["label"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt + target)
        targets.append([0] * len(prompt) + [1] * len(target))
    width = max(len(x) for x in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    tmask = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, (row, t) in enumerate(zip(rows, targets)):
        ids[i, : len(row)] = torch.tensor(row)
        att[i, : len(row)] = 1
        tmask[i, : len(t)] = torch.tensor(t, dtype=torch.float32)
    return ids, att, tmask


def ptx_nll(module, records, tokenizer, chunk_size, compute_dtype, device) -> torch.Tensor:
    """Mean token NLL of the records' labels given their prompts (differentiable)."""
    ids, att, tmask = ptx_tensors(records, tokenizer)
    with autocast(compute_dtype, device):
        logits = module(input_ids=ids, attention_mask=att, position_ids=position_ids(att), use_cache=False).logits
    logp = token_logprobs(logits[:, :-1], ids[:, 1:], chunk_size=chunk_size)
    mask = tmask[:, 1:]
    return -(logp * mask).sum() / mask.sum().clamp_min(1)


def build_ptx_loss(args, policy, plan, records: list[dict]):
    """A callable () -> (loss, metrics) drawing a micro-batch of PTX records, or None when PTX is off."""
    from ppokit.data import PromptLoader

    if args.ptx_coeff <= 0:
        return None
    usable = [r for r in records if r.get("label")]
    if not usable:
        raise ValueError("ptx_coeff > 0 needs ptx_datasets (or ptx_task_config) records with a target (last `tgt` turn)")
    loader = PromptLoader(usable, batch_size=plan.micro_batch_size, seed=args.seed + 1)

    def ptx_loss():
        nll = ptx_nll(policy.engine.module, loader.next_batch(), policy.tokenizer, args.chunk_size,
                      policy.compute_dtype, policy.device)
        return args.ptx_coeff * nll, {"actor/ptx_loss": float(nll.detach())}

    ptx_loss.loader = loader
    return ptx_loss
