"""Prepared verl-layout data and the two launch lines of the issue (model paths replaced)."""

import json

from ppokit.data.verl_rows import verl_rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def write_parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), str(path))
    return str(path)


def gsm8k_files(tmp_path, n=16):
    train = write_parquet(tmp_path / "train.parquet", verl_rows("gsm8k", n, seed=1))
    test = write_parquet(tmp_path / "test.parquet", verl_rows("gsm8k", 4, seed=2, split="test"))
    return train, test


def ppo_line(model, data):
    """verl's PPO quick-start line (models/... -> `model`, data -> `data`)."""
    return ["trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
            f"actor_rollout_ref.model.path={model}", f"critic.model.path={model}",
            "data.train_batch_size=128", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
            "actor_rollout_ref.actor.ppo_micro_batch_size=4", f"data.train_files={data}", f"data.val_files={data}"]


def grpo_line(model, data):
    """The GRPO line from the widely copied guide (with its actor_rollout.ref misspelling)."""
    return ["actor_rollout.ref.rollout.n=8", "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True",
            f"actor_rollout_ref.model.path={model}", f"data.train_files={data}", f"data.val_files={data}"]


DRGRPO_PAIR = ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm", "algorithm.norm_adv_by_std_in_grpo=False"]
