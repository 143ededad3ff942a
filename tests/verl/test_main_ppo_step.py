"""The two verl launch lines run one CPU step on a tiny model with verl-layout gsm8k data and no reward config."""

import json

import pytest
from verl_helpers import DRGRPO_PAIR, grpo_line, gsm8k_files, ppo_line

from ppokit.main_ppo import main

SMALL = ["trainer.n_gpus_per_node=1", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
         "data.max_prompt_length=384", "data.max_response_length=8", "actor_rollout_ref.rollout.name=hf",
         "trainer.total_training_steps=1", "trainer.logger=[console]", "trainer.save_freq=-1",
         "actor_rollout_ref.actor.optim.lr=1e-3"]


def _metrics(out_dir):
    lines = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [m for m in lines if "reward/mean" in m]


@pytest.mark.parametrize("line, extra", [
    (ppo_line, ["actor_rollout_ref.actor.ppo_micro_batch_size=2"]),
    (grpo_line, ["actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", *DRGRPO_PAIR]),
])
def test_verl_line_runs_one_cpu_step(tiny_model_dir, tmp_path, line, extra, capsys):
    train, test = gsm8k_files(tmp_path)
    out_dir = tmp_path / "ckpt"
    code = main([*line(tiny_model_dir, train), f"data.val_files={test}", *SMALL, *extra,
                 f"trainer.default_local_dir={out_dir}"])
    assert code == 0, capsys.readouterr().err
    steps = _metrics(out_dir)
    assert len(steps) == 1
    assert "reward/rule" in steps[0] and 0.0 <= steps[0]["reward/mean"] <= 1.0  # gsm8k's scorer via data_source


def test_more_than_one_gpu_planned_starts_that_many_processes(monkeypatch, tmp_path):
    import ppokit.launch

    started = {}

    def fake_run(command, env):
        started["command"], started["env"] = list(command), dict(env)
        return 0

    monkeypatch.setattr(ppokit.launch, "run_command", fake_run)
    line = ppo_line("tiny-model", "d.parquet")  # trainer.n_gpus_per_node=2; nothing is loaded before the launch
    assert main(line) == 0
    command = started["command"]
    assert command[1:3] == ["-m", "torch.distributed.run"]
    assert command[command.index("--nproc_per_node") + 1] == "2"
    assert command[command.index("-m", 3):][:2] == ["-m", "ppokit.main_ppo"] and command[-len(line):] == line
    assert main([*line, "trainer.nnodes=2"]) == 2  # several nodes: the user starts each one
