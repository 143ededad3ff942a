"""Helpers shared by the PPO tests: a tiny PPO Session and parameter snapshots."""

import torch

from ppokit.args import load_arguments
from ppokit.session import Session
from ppokit.testing import distinct_chars, letter_a  # noqa: F401  (re-exported for the tests)


def constant_one(prompts, responses, **fields):
    return [1.0] * len(responses)



def ppo_overrides(model_path, data_path, tmp_path, **extra):
    base = dict(
        actor_model_name_or_path=model_path,
        train_datasets=data_path,
        rl_algorithm="ppo",
        global_batch_size=4,
        rollout_n=1,
        global_mini_batch_size=4,
        per_device_train_batch_size=4,
        max_dec_len=8,
        max_prompt_len=32,
        max_length=64,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        max_steps=4,
        kl_coeff=0.0,
        kl_loss_coeff=0.0,
        output_dir=str(tmp_path / "out"),
        logging_dir=str(tmp_path / "vdl"),
        report_to=["none"],
        seed=1,
        disable_tqdm=True,
        save_strategy="no",
        logging_steps=1,
    )
    base.update(extra)
    return base


def make_ppo(model_path, data_path, tmp_path, reward=letter_a, **extra) -> Session:
    args = load_arguments(None, overrides=ppo_overrides(model_path, data_path, tmp_path, **extra))
    return Session(args, reward_functions=None if reward is None else [reward])


def snapshot(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def changed(before: dict, after: dict) -> list[str]:
    return [k for k in before if not torch.equal(before[k], after[k])]


def rollout_with_advantages(session):
    batch = session.rollout()
    session.score(batch)
    batch = session.latest(batch)
    session.compute_advantages(batch)
    batch = session.latest(batch)
    return batch
