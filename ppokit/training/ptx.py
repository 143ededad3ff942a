"""PaddleNLP's PTX auxiliary loss: `ptx_coeff` × token NLL of supervised targets, added to actor updates.

`ptx_datasets` (or `ptx_task_config`) holds src/tgt records whose last `tgt` turn is the target; the
prompt is the conversation before it, rendered as for rollouts. Once per actor mini-batch (with its
first micro-batch) a micro-batch of these records is drawn and ptx_coeff × mean target-token NLL is
added to the loss. `actor/ptx_loss` logs the NLL itself (not multiplied by ptx_coeff).
"""

from __future__ import annotations

import torch

from ppokit.algos.logprobs import token_logprobs
from ppokit.engine import world_size
from ppokit.models.loading import autocast_context
from ppokit.training.device import to_model_device
from ppokit.training.forward import position_ids
from ppokit.training.lm_head import chunked_head_logprobs, head_skipped, split_head


def ptx_tensors(records: list[dict], tokenizer, max_length: int | None = None):
    """(input_ids, attention_mask, target_mask), each (B, L): rendered prompt then the target + EOS, right-padded.

    With `max_length`, the target is cut so prompt + target fit (prompts were already limited to max_prompt_len).
    """
    rows, targets = [], []
    for r in records:
        prompt = r["_prompt_ids"]
        target = tokenizer(r["label"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if max_length is not None:
            target = target[: max(max_length - len(prompt), 1)]
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


def ptx_nll(module, records, tokenizer, chunk_size, compute_dtype, device, max_length=None) -> torch.Tensor:
    """Mean token NLL of the records' targets given their prompts (differentiable, a 0-d tensor).

    The model's forward gives hidden states (its LM head passed through, `head_skipped`) and the head runs on the
    N target positions only, `chunk_size` at a time (`chunked_head_logprobs`): never the (B, L, V) logits, which
    for 8 x 2048 tokens of a 152k vocabulary are ~10 GB in float32. Models whose logits are more than
    `head(hidden)` (`split_head` is None) build the logits, and only the target positions' reach the log-softmax.
    """
    ids, att, tmask = ptx_tensors(records, tokenizer, max_length)
    ids, att, tmask = to_model_device((ids, att, tmask), device)
    targets = tmask[:, 1:].bool()  # (B, L-1): the positions whose next token is a target token
    labels = ids[:, 1:][targets][None]  # (1, N)
    head = split_head(module)
    with autocast_context(compute_dtype, device), head_skipped(head):
        out = module(input_ids=ids, attention_mask=att, position_ids=position_ids(att), use_cache=False).logits
    kept = out[:, :-1][targets][None]  # (1, N, H) hidden states, or (1, N, V) logits without a split head
    if head is not None:
        logp, _ = chunked_head_logprobs(head, kept, labels, chunk_size, "none", 1.0, compute_dtype, device)
    else:
        logp = token_logprobs(kept, labels, chunk_size=chunk_size)
    return -logp.float().sum() / targets.sum().clamp_min(1)


def build_ptx_loss(args, policy, plan, records: list[dict]):
    """A callable () -> (loss, metrics) drawing a micro-batch of PTX records, or None when PTX is off.

    The callable carries `.loader` (its PromptLoader, saved in checkpoints).
    """
    from ppokit.data import PromptLoader

    if args.ptx_coeff <= 0:
        return None
    usable = [r for r in records if r.get("label")]
    if not usable:
        where = args.ptx_datasets or args.ptx_task_config
        raise ValueError(
            f"ptx_coeff={args.ptx_coeff} needs supervised records, but {where or 'no ptx_datasets'} gave "
            f"{len(records)} records and none has a target; set ptx_datasets to src/tgt records whose last "
            "`tgt` turn is the answer to learn, or set ptx_coeff to 0."
        )
    loader = PromptLoader(usable, batch_size=plan.micro_batch_size, seed=args.seed + 1)

    def ptx_loss():
        nll = ptx_nll(policy.engine.module, loader.next_batch(), policy.tokenizer, args.chunk_size,
                      policy.compute_dtype, policy.device, args.max_length)
        # Each rank adds its own PTX term and the actor scales its loss by the world size before
        # DeepSpeed averages gradients: divide here so PTX weighs ptx_coeff x the mean over ranks.
        return args.ptx_coeff * nll / world_size(), {"actor/ptx_loss": float(nll.detach())}

    ptx_loss.loader = loader
    return ptx_loss
