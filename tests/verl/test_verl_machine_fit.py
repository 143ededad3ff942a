"""A verl line on the machine at hand: verl's default 8 GPUs do not stop a CPU run, validation files are read only
when validation runs, errors name verl's keys, and the notes of --print_config are also said when the line trains."""

import logging

import pytest
from verl_helpers import gsm8k_files

import ppokit.args.loader as loader
from ppokit.args import ConfigError
from ppokit.main_ppo import main, parse_main_ppo


def seed_line(model, train, *extra):
    """The seed's GRPO line: model, data and reward given, no trainer.n_gpus_per_node, no data.val_files."""
    return ["actor_rollout.ref.rollout.n=4", "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True",
            f"actor_rollout_ref.model.path={model}", f"data.train_files={train}", "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", *extra]


def test_verls_default_gpu_count_follows_the_devices_present(tmp_path, monkeypatch, caplog):
    train, _ = gsm8k_files(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a machine without GPUs, also where the tests run on one
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(loader, "_LOGGED", set())  # notes are said once per process
    with caplog.at_level(logging.INFO, logger="ppokit"):
        args, translation, _ = parse_main_ppo(seed_line("m", train))
    assert translation.world_size == 1 and args.global_batch_size == 2
    said = [n for n in translation.notes if n.startswith("trainer.n_gpus_per_node: verl's default is 8")]
    assert len(said) == 1 and "no GPU: one process trains on the CPU" in said[0]
    assert sum(said[0] in r.getMessage() for r in caplog.records) == 1  # said once, when the line trains too
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert parse_main_ppo(seed_line("m", train))[1].world_size == 2
    # given on the line: the user's count, and the error says it in verl's keys
    with pytest.raises(ConfigError) as err:
        parse_main_ppo(seed_line("m", train, "trainer.n_gpus_per_node=8"))
    text = str(err.value)
    assert "In verl's keys: global_batch_size comes from data.train_batch_size=2" in text
    assert "trainer.n_gpus_per_node = 8" in text


def test_val_files_are_read_only_when_validation_runs(tmp_path, monkeypatch):
    train, test = gsm8k_files(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    args, translation, _ = parse_main_ppo(seed_line("m", train))  # verl's default val_files: never read
    assert args.eval_datasets is None and args.evaluation_strategy == "no"
    args, translation, _ = parse_main_ppo(seed_line("m", train, f"data.val_files={test}"))
    assert args.eval_datasets is None
    assert any("data.val_files is not read: validation runs only when trainer.test_freq > 0" in n
               for n in translation.notes)
    args, _, _ = parse_main_ppo(seed_line("m", train, f"data.val_files={test}", "trainer.test_freq=2"))
    assert args.eval_datasets == test and args.eval_steps == 2


def test_a_missing_default_val_file_is_named_in_verls_keys(tiny_model_dir, tmp_path, monkeypatch, capsys):
    train, _ = gsm8k_files(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # verl's default ~/data/rlhf/gsm8k/test.parquet: absent
    code = main(seed_line(tiny_model_dir, train, "trainer.test_freq=1", "actor_rollout_ref.rollout.name=hf",
                          f"trainer.default_local_dir={tmp_path / 'out'}", "trainer.logger=[console]"))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "data.val_files='~/data/rlhf/gsm8k/test.parquet' (verl's default; your line does not set it)" in err


def test_print_config_notes_are_said_when_the_line_trains(tmp_path, monkeypatch, caplog):
    train, _ = gsm8k_files(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(loader, "_LOGGED", set())
    line = seed_line("m", train, "algorithm.use_kl_in_reward=True", "actor_rollout_ref.actor.fsdp_config.grad_offload=1")
    with caplog.at_level(logging.INFO, logger="ppokit"):
        _, translation, _ = parse_main_ppo(line)
    logged = " | ".join(r.getMessage() for r in caplog.records)
    assert "algorithm.use_kl_in_reward=True is ignored for adv_estimator=grpo" in logged
    assert "grad_offload=1 has no effect here" in logged and "removed in verl v0.3.0.post1" in logged
