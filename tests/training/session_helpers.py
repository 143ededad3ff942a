"""Helpers shared by the session tests."""

from ppokit.testing import distinct_chars, letter_a  # noqa: F401  (re-exported for the tests)


def tiny_overrides(model_path, data_path, tmp_path, **extra):
    base = dict(
        actor_model_name_or_path=model_path,
        train_datasets=data_path,
        rl_algorithm="grpo",
        global_batch_size=4,
        rollout_n=4,
        global_mini_batch_size=4,
        per_device_train_batch_size=16,
        max_dec_len=8,
        max_prompt_len=32,
        max_length=64,
        learning_rate=1e-3,
        max_steps=4,
        kl_loss_coeff=0.0,
        output_dir=str(tmp_path / "out"),
        logging_dir=str(tmp_path / "vdl"),
        seed=1,
        disable_tqdm=True,
        save_strategy="no",
        logging_steps=1,
    )
    base.update(extra)
    return base

