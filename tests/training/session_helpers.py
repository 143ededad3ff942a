"""Helpers shared by the session tests."""


def letter_a(prompts, responses, **fields):
    """Fraction of 'a' characters in the response: a task a tiny random model learns in a few dozen steps."""
    return [r.count("a") / max(len(r), 1) for r in responses]


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


def distinct_chars(prompts, responses, **fields):
    """Number of distinct characters: varies between samples, so advantages are never all zero."""
    return [float(len(set(r))) for r in responses]
