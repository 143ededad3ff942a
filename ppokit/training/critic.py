"""The PPO critic: a value model in its own DeepSpeed engine, its values for a batch, and its update.

Where the critic starts (PaddleNLP's rule, then ppokit's fallback): `critic_model_name_or_path`, else
`reward_model_name_or_path` (a reward model's `score` head becomes the value head), else the actor's
weights with a fresh value head. Its optimizer and schedule take the `critic_*` keys
(`engine_setup.train_engine(..., critic=True)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ppokit.algos.masked import masked_mean, masked_var
from ppokit.algos.reduce import reduce_loss
from ppokit.algos.value_loss import VALUE_LOSSES
from ppokit.engine import current_lr
from ppokit.training.batch import RolloutBatch
from ppokit.training.engine_setup import option, train_engine, zero3_config
from ppokit.training.forward import batched_values, value_forward
from ppokit.training.update import LossConfig, minibatch_update


@dataclass
class Critic:
    engine: object  # deepspeed engine around a ValueModel
    compute_dtype: torch.dtype | None
    device: torch.device
    batch_size: int  # per_device_value_batch_size
    source: str | None = None  # the folder it was initialised from (None: a copy of the in-memory actor)

    @property
    def model(self):
        """The ValueModel (unwrapped from DeepSpeed): `.backbone` and `.value_head`."""
        return self.engine.module

    def values(self, batch: RolloutBatch) -> torch.Tensor:
        """(B, R) values of the batch's states, no grad."""
        return batched_values(self.engine.module, batch, self.batch_size, self.compute_dtype, self.device)

    def save(self, folder: Path, weights_only: bool) -> None:
        from ppokit.models import save_value_model

        if not weights_only:
            self.engine.save_checkpoint(str(folder / "critic_ds"), tag="state")
        save_value_model(self.engine.module, folder / "critic")  # every rank (ZeRO-3 gathers); rank 0 writes

    def load(self, folder: Path) -> None:
        from ppokit.models import load_value_state

        if (folder / "critic_ds").is_dir():
            self.engine.load_checkpoint(str(folder / "critic_ds"), tag="state", load_optimizer_states=True,
                                        load_lr_scheduler_states=True)
        else:
            load_value_state(self.engine.module, folder / "critic")


def critic_source(args, policy) -> str | None:
    """PaddleNLP's rule: critic_model_name_or_path, else the reward model path; ppokit falls back to the actor.

    None means "copy the in-memory actor" (a Session built with `model=`).
    """
    return args.critic_model_name_or_path or args.reward_model_name_or_path or policy.model_path


def check_same_vocabulary(path: str, tokenizer) -> None:
    """The critic reads the actor's token ids, so every actor token must have the same id in the critic's vocabulary."""
    from transformers import AutoTokenizer

    try:
        theirs = AutoTokenizer.from_pretrained(path).get_vocab()
    except (OSError, ValueError, TypeError):
        return  # the folder has no tokenizer: nothing to compare
    ours = tokenizer.get_vocab()
    differ = [tok for tok, i in ours.items() if theirs.get(tok) != i]
    if differ:
        raise ValueError(
            f"The critic would start from {path}, whose tokenizer differs from the actor's ({len(differ)} of "
            f"{len(ours)} tokens, e.g. {differ[:3]}); the critic reads the actor's token ids. Set "
            "critic_model_name_or_path to a model with the actor's tokenizer, or leave critic_model_name_or_path "
            "and reward_model_name_or_path unset to start the critic from the actor."
        )


def build_critic(args, dist, run, policy) -> Critic:
    """A value model (backbone + scalar head) trained by its own engine with the critic_* optimizer and schedule."""
    from ppokit.models import attention_implementation, dtype_for, load_value_model, resolve_model_path

    param_dtype, compute_dtype = dtype_for(args.bf16, args.fp16, policy.device)
    source = critic_source(args, policy)
    recompute = bool(option(args, "recompute", critic=True))
    if source is None:
        model = load_value_model(None, dtype=param_dtype, device=policy.device, backbone=policy.engine.module,
                                 gradient_checkpointing=recompute)
    else:
        source = resolve_model_path(source)
        if source != policy.model_path:
            check_same_vocabulary(source, policy.tokenizer)
        model = load_value_model(source, dtype=param_dtype, device=policy.device, gradient_checkpointing=recompute,
                                 attn_implementation=attention_implementation(args.use_flash_attention, compute_dtype),
                                 zero3_config=zero3_config(args, run.batch, policy.device, critic=True))
    from ppokit.training.model_setup import configure_model

    configure_model(args, model.backbone, recompute)
    engine = train_engine(model, args, run, policy.device, critic=True)
    bs = args.per_device_value_batch_size if args.per_device_value_batch_size > 0 else run.batch.micro_batch_size
    return Critic(engine=engine, compute_dtype=compute_dtype, device=policy.device, batch_size=bs, source=source)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[returns - values] / Var[returns] over valid tokens (0 when the returns do not vary)."""
    var_r = masked_var(returns, mask)
    if float(var_r) == 0.0:
        return 0.0
    return float(1 - masked_var(returns - values, mask) / var_r)


def critic_loss(critic: Critic, part: RolloutBatch, cfg: LossConfig, denoms) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped value loss of one micro-batch (its share of the mini-batch) and its clip fraction."""
    values = value_forward(critic.engine, part, critic.compute_dtype, critic.device)  # the engine: ZeRO-3 accumulates
    per_token, m = VALUE_LOSSES["clipped"](values, part.values, part.returns, part.loss_mask,
                                           cfg.clip_range_value)
    tokens, seqs = denoms
    loss = reduce_loss(per_token, part.loss_mask, "token-mean", global_tokens=tokens, global_seqs=seqs)
    return loss, {"critic/value_loss": float(loss.detach()), "critic/vf_clipfrac": float(m["vf_clipfrac"])}


def critic_update(critic: Critic, batch: RolloutBatch, cfg: LossConfig, plan) -> dict[str, float]:
    """Clipped value loss against the batch's returns, in the actor's mini/micro-batch layout."""
    if batch.values is None or batch.returns is None:
        raise ValueError("The critic update needs batch.values and batch.returns: run compute_advantages(batch) first.")
    lr = current_lr(critic.engine)  # the rate this rollout's (first) optimizer step uses, not the one after it
    out = minibatch_update(critic.engine, batch, plan, lambda part, denoms, first: critic_loss(critic, part, cfg, denoms),
                           prefix="critic", device=critic.device, hint="check the rewards (clip_range_score, normalize_reward) and "
                           "critic_learning_rate")
    out["critic/values_mean"] = float(masked_mean(batch.values, batch.loss_mask))
    out["critic/returns_mean"] = float(masked_mean(batch.returns, batch.loss_mask))
    out["critic/explained_variance"] = explained_variance(batch.values, batch.returns, batch.loss_mask)
    out["critic/lr"] = lr
    return out
