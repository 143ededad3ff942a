"""The keys that shape a loaded model after transformers built it: dropout probabilities, re-entrant
recompute (actor and critic), and PaddleNLP's extra `eos_token` (actor)."""

from __future__ import annotations

import logging

from ppokit.args import ConfigError
from ppokit.models.loading import enable_recompute, set_dropout

logger = logging.getLogger("ppokit")


def configure_model(args, model, recompute: bool) -> None:
    """Dropout probabilities always; re-entrant checkpointing when recompute is on and the key was set."""
    for note in set_dropout(model, args.hidden_dropout_prob, args.attention_probs_dropout_prob):
        logger.info(note)
    if recompute and args.recompute_use_reentrant and "recompute_use_reentrant" in args.model_fields_set:
        enable_recompute(getattr(model, "get_base_model", lambda: model)(), reentrant=True)


def add_stop_token(model, tokenizer, token: str) -> None:
    """PaddleNLP's `eos_token`: one more token that ends a response, added to the model's generation config
    (which the rollout engine reads for its stop ids)."""
    if not token:
        return
    ids = tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        raise ConfigError(f"eos_token={token!r} is {len(ids)} tokens for this tokenizer; it must be exactly one "
                          "token (e.g. '<|endoftext|>'), or '' for none")
    config = model.generation_config
    current = config.eos_token_id
    known = [current] if isinstance(current, int) else list(current or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in known:
        known.append(tokenizer.eos_token_id)
    config.eos_token_id = known + [i for i in ids if i not in known]
