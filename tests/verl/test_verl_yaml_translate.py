"""Nested verl YAML == the same overrides; translate round-trips PaddleNLP JSON <-> verl lines."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ppokit.args import ConfigError, load_arguments
from ppokit.dialects.verl.rewrite import to_paddle_values, to_verl_tokens, translate
from ppokit.main_ppo import parse_main_ppo

NESTED = {
    "data": {"train_files": "d/train.parquet", "val_files": ["d/test.parquet"], "train_batch_size": 16,
             "max_prompt_length": 256, "max_response_length": 128},
    "actor_rollout_ref": {
        "model": {"path": "tiny-model", "override_config": {"attn_implementation": "eager"}},
        "actor": {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 4, "use_kl_loss": True,
                  "kl_loss_coef": "1e-3", "optim": {"lr": "1e-6"}, "loss_agg_mode": "seq-mean-token-sum-norm"},
        "rollout": {"n": 4, "name": "hf", "temperature": 0.7},
    },
    "algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": False},
    "trainer": {"n_gpus_per_node": 1, "total_training_steps": 5, "logger": ["console"]},
    "hydra": {"run": {"dir": "."}},
}
EQUIVALENT = ["data.train_files=d/train.parquet", "data.val_files=[d/test.parquet]", "data.train_batch_size=16",
              "data.max_prompt_length=256", "data.max_response_length=128", "actor_rollout_ref.model.path=tiny-model",
              "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
              "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.001",
              "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
              "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.name=hf",
              "actor_rollout_ref.rollout.temperature=0.7", "algorithm.adv_estimator=grpo",
              "algorithm.norm_adv_by_std_in_grpo=False", "trainer.n_gpus_per_node=1",
              "trainer.total_training_steps=5", "trainer.logger=[console]"]


def test_nested_yaml_equals_its_overrides(tmp_path):
    (tmp_path / "my_recipe.yaml").write_text(yaml.safe_dump(NESTED))
    from_yaml, _, _ = parse_main_ppo(["--config-path", str(tmp_path), "--config-name", "my_recipe"])
    from_line, _, _ = parse_main_ppo(EQUIVALENT)
    assert from_yaml.to_dict() == from_line.to_dict()
    assert (from_yaml.rollout_n, from_yaml.learning_rate, from_yaml.kl_loss_coeff) == (4, 1e-6, 1e-3)
    overridden, _, _ = parse_main_ppo([f"--config-path={tmp_path}", "--config-name=my_recipe", "actor_rollout_ref.rollout.n=2"])
    assert overridden.rollout_n == 2  # overrides apply after the YAML
    flat = tmp_path / "flat.json"
    flat.write_text(translate(str(tmp_path / "my_recipe.yaml"), "paddle"))
    assert load_arguments(flat).to_dict() == from_yaml.to_dict()


def test_yaml_unknown_keys_are_all_listed(tmp_path):
    bad = {"data": {"train_bach_size": 4}, "trainer": {"n_gpu_per_node": 1}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError) as err:
        parse_main_ppo(["--config-path", str(tmp_path), "--config-name", "bad.yaml"])
    text = str(err.value)
    assert "did you mean data.train_batch_size?" in text and "did you mean trainer.n_gpus_per_node?" in text


PADDLE = {"actor_model_name_or_path": "tiny-model", "train_datasets": "d/train.jsonl", "rl_algorithm": "grpo",
          "use_rule_reward": True, "global_batch_size": 8, "rollout_n": 4, "global_mini_batch_size": 4,
          "per_device_train_batch_size": 8, "max_prompt_len": 128, "max_dec_len": 64, "max_length": 512,
          "learning_rate": 2e-5, "kl_loss_coeff": 0.01, "max_steps": 10, "output_dir": "out/x", "bf16": True,
          "clip_range_ratio_high": 0.28, "report_to": "visualdl", "logging_steps": 1, "temperature": 0.9}


def effective(args, but=()) -> dict:
    """The arguments with an effect in args' configuration, less the keys in `but`."""
    from ppokit.args.effect import inactive

    off = set(inactive(args)) | set(but)
    return {k: v for k, v in args.to_dict().items() if k not in off}


def said_note(err: str) -> tuple[list[str], list[str]]:
    """(keys the note says the line cannot say, every note line) from translate's stderr."""
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    cannot = [n for n in notes if "verl's keys cannot say" in n]
    keys = re.findall(r"(\w+)=", cannot[0].split("cannot say ", 1)[1].split(";", 1)[0]) if cannot else []
    return keys, notes


def test_translate_round_trips_paddle_json_through_verl_lines(tmp_path, capsys):
    src = tmp_path / "grpo.json"
    src.write_text(json.dumps(PADDLE))
    original = load_arguments(src)
    line = translate(str(src), "verl")
    assert line.startswith("python3 -m verl.trainer.main_ppo")
    tokens = shlex.split(line.replace("\\\n", " "))[3:]
    assert "actor_rollout_ref.actor.clip_ratio_high=0.28" in tokens and "actor_rollout_ref.rollout.n=4" in tokens
    left_out, _ = said_note(capsys.readouterr().err)
    from_line, _, _ = parse_main_ppo(tokens)
    assert effective(from_line, left_out) == effective(original, left_out)
    back = tmp_path / "back.json"
    back.write_text(translate(line, "paddle"))
    assert effective(load_arguments(back), left_out) == effective(original, left_out)


@pytest.mark.parametrize("config", ["config/grpo_argument.json", "config/ppo_argument.json",
                                    "config/grpo_tools_argument.json"])
def test_a_translated_line_means_in_verl_what_the_config_means_here(config):
    """`args translate CONFIG --to verl` as a person runs it: no KL-in-reward switch for GRPO without KL, no key
    verl lacks; the line read back by ppokit's verl reader gives the same arguments, except what the note names."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "ppokit.args", "translate", config, "--to", "verl"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    tokens = shlex.split(done.stdout.replace("\\\n", " "))[3:]
    assert tokens and all("." in t.split("=")[0] for t in tokens), tokens  # verl's dotted keys only
    original = load_arguments(root / config)
    if original.rl_algorithm == "grpo":
        assert not any("use_kl_in_reward" in t or "kl_ctrl" in t or t.startswith("critic.") for t in tokens), tokens
    else:
        assert "algorithm.use_kl_in_reward=true" in tokens  # PPO puts kl_coeff x KL in the reward
    left_out, notes = said_note(done.stderr)
    assert all(k not in {t.split("=")[0] for t in tokens} for k in left_out)
    from_line, _, _ = parse_main_ppo(tokens)
    assert effective(from_line, left_out) == effective(original, left_out)
    if left_out:
        assert "left out of the line, which runs with" in notes[0]


def test_translate_verl_line_to_paddle_and_the_cli(tmp_path):
    line = ("python3 -m verl.trainer.main_ppo actor_rollout.ref.rollout.n=8 algorithm.adv_estimator=grpo "
            "actor_rollout_ref.actor.use_kl_loss=True trainer.n_gpus_per_node=2 data.train_batch_size=16 "
            "actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.ppo_micro_batch_size=8")
    values = to_paddle_values(shlex.split(line)[3:])
    assert (values["rl_algorithm"], values["rollout_n"], values["kl_loss_coeff"]) == ("grpo", 8, 0.001)
    assert values["per_device_train_batch_size"] == 4 and "--nproc_per_node 2" in values["comment"]
    done = subprocess.run([sys.executable, "-m", "ppokit.args", "translate", line, "--to", "paddle"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == values
    bad = subprocess.run([sys.executable, "-m", "ppokit.args", "translate", line, "--to", "trl"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "choose verl or paddle" in bad.stderr


def test_to_verl_tokens_leave_keys_verl_lacks_out_with_a_note(tmp_path):
    src = tmp_path / "p.json"
    src.write_text(json.dumps(PADDLE))
    notes: list = []
    tokens = to_verl_tokens(str(src), notes)
    assert not any(t.startswith(("use_rule_reward=", "bf16=", "report_to=")) for t in tokens)
    assert "bf16=true" in notes[0] and "report_to=[\"visualdl\"]" in notes[0]
    assert not any(t.startswith("actor_rollout_ref.actor.optim.lr=") and t.endswith("e-06") for t in tokens)


def test_per_device_paddle_file_becomes_the_same_plan_in_verl_units():
    from pathlib import Path

    from ppokit.args.batch import batch_plan

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "paddle" / "ppo_config_d4de12c76.json"
    original = load_arguments(fixture)
    assert batch_plan(original).mode == "per_device"
    notes: list = []
    tokens = to_verl_tokens(str(fixture), notes)
    from_line, _, _ = parse_main_ppo(tokens)
    plan = batch_plan(from_line).to_dict()
    assert plan.pop("mode") == "global"
    assert plan == {k: v for k, v in batch_plan(original).to_dict().items() if k != "mode"}
    assert any("per-device batch sizes" in n for n in notes)
    same = {k for k, v in original.to_dict().items() if from_line.to_dict()[k] == v}  # ppo: KL in the reward
    assert {"actor_model_name_or_path", "learning_rate", "rl_algorithm", "kl_coeff", "max_dec_len"} <= same
