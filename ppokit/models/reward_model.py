"""Reward models: a sequence-classification model with one output, scored in batches."""

from __future__ import annotations

import torch

from ppokit.models.loading import autocast_context


def load_reward_model(
    path: str,
    dtype: torch.dtype = torch.float32,
    device="cpu",
    tokenizer=None,
    attn_implementation: str | None = None,
):
    """Load `path` as `AutoModelForSequenceClassification(num_labels=1)`, frozen and in eval mode.

    A folder without a trained score head (e.g. a plain causal LM) is an error: transformers would
    otherwise give it a random head and every reward would be noise. With `tokenizer`, the model's
    pad id is aligned with it (the model pools at the last non-pad token).
    """
    from transformers import AutoModelForSequenceClassification

    kwargs = {"dtype": dtype, "num_labels": 1, "output_loading_info": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model, info = AutoModelForSequenceClassification.from_pretrained(path, **kwargs)
    head_missing = [k for k in info.get("missing_keys", []) if k.split(".")[0] in {"score", "classifier"}]
    if head_missing:
        raise ValueError(
            f"{path} has no trained reward head (missing {', '.join(sorted(head_missing))}); "
            "reward_model_name_or_path must be a sequence-classification reward model with one output, "
            "not a plain language model."
        )
    if tokenizer is not None:
        model.config.pad_token_id = tokenizer.pad_token_id
    model.requires_grad_(False)
    return model.eval().to(device)


@torch.no_grad()
def score_texts(
    model,
    tokenizer,
    prompts: list[str],
    responses: list[str],
    batch_size: int = 8,
    max_length: int | None = None,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Reward of each `prompt + response` text: float32 tensor (B,) on CPU.

    Prompts are already rendered (chat template included), so no special tokens are added.
    Right padding; the model scores the last non-pad token (its config's pad id must be the
    tokenizer's, which `load_reward_model(tokenizer=...)` ensures). With `max_length`, longer
    texts are cut at the right end; keep prompt + response within the reward model's length.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"score_texts got {len(prompts)} prompts but {len(responses)} responses; they must pair up.")
    if model.config.pad_token_id != tokenizer.pad_token_id:
        raise ValueError(
            "The reward model's pad_token_id differs from its tokenizer's; load it with "
            "load_reward_model(path, tokenizer=tokenizer) so it finds the last real token."
        )
    device = next(model.parameters()).device
    texts = [p + r for p, r in zip(prompts, responses)]
    scores = []
    for start in range(0, len(texts), batch_size):
        enc = tokenizer(
            texts[start : start + batch_size],
            return_tensors="pt",
            padding=True,
            padding_side="right",
            add_special_tokens=False,
            truncation=max_length is not None,
            max_length=max_length,
        ).to(device)
        with autocast_context(compute_dtype, device):
            logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
        scores.append(logits[:, 0].float().cpu())
    return torch.cat(scores) if scores else torch.zeros(0)
