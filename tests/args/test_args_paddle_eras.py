"""PaddleNLP's eras load and read as PaddleNLP read them (issue 19), on fixtures of each era's shape
(tests/fixtures/paddle_eras, written for these tests)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.algorithms import algorithm
from ppokit.args import ConfigError, batch_plan, load_arguments, resolved_config

ROOT = Path(__file__).resolve().parents[2]
ERAS = ROOT / "tests" / "fixtures" / "paddle_eras"


def print_config(config, *argv, world_size=1, script="run_ppo.py"):
    env = {**os.environ, "WORLD_SIZE": str(world_size)}
    done = subprocess.run([sys.executable, script, str(config), *argv, "--print_config"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_underscore_keys_are_comments_in_one_note_and_the_memory_metric_typo_is_accepted():
    path = ERAS / "ppo4d_parked_keys.json"
    args = load_arguments(path)
    assert args.actor_model_name_or_path == "Qwen/Qwen2.5-7B-Instruct-1M"  # the parked value is not read
    assert args.output_dir == "checkpoints/ppo4d"
    parked = [n for n in args.notes if "keys starting with '_'" in n]
    assert parked == [f"{path}: keys starting with '_' are read as comments (PaddleNLP's parser dropped them): "
                      "_train_datasets, _actor_model_name_or_path, _output_dir."]
    assert any("'skip_memory_metric' ignored" in n for n in args.notes)
    with pytest.raises(ConfigError, match="unknown key 'skip_memory_metrix'"):  # other unknown keys still refused
        load_arguments(overrides={"skip_memory_metrix": True})


def test_epochs_minus_one_is_ignored_when_max_steps_is_set():
    args = load_arguments(ERAS / "qwen_grpo_32b_epochs.yaml")
    assert args.max_steps == 1000 and args.num_train_epochs == 1.0  # the default, unused with max_steps > 0
    assert any(n.startswith("num_train_epochs=-1 is ignored: max_steps=1000 > 0") for n in args.notes)
    with pytest.raises(ConfigError, match="num_train_epochs"):  # without max_steps -1 epochs is still an error
        load_arguments(ERAS / "qwen_grpo_32b_epochs.yaml", overrides={"max_steps": -1})


def test_vapo_file_loads_with_the_paper_recipe_and_paddlenlp_eval_cap():
    args = load_arguments(ERAS / "qwen_vapo_gsm8k.yaml")
    assert args.rl_algorithm == "vapo" and algorithm("vapo").needs_critic and args.use_rule_reward
    assert args.critic_warmup_steps == 50  # pretrain_critic_steps
    assert (args.lam_critic, args.length_adaptive_alpha, args.positive_lm_coeff) == (1.0, 0.05, 0.1)
    assert (args.clip_range_ratio_low, args.clip_range_ratio_high, args.loss_agg_mode) == (0.2, 0.28, "token-mean")
    # one process, TP 2 -> one data-parallel rank: cap 32 x 8 x 1 / 1 = 256
    assert args.per_device_eval_batch_size == 256
    assert any("per_device_eval_batch_size=1319 is capped at" in n for n in args.notes)
    # PaddleNLP's run: 8 GPUs with TP 2 -> 4 data-parallel ranks -> 32 x 8 / 4 = 64
    derived = print_config(ERAS / "qwen_vapo_gsm8k.yaml", world_size=8)
    assert derived["per_device_eval_batch_size"] == 64 and derived["derived"]["data_parallel_size"] == 4


def test_ptx_coeff_without_ptx_data_turns_ptx_off_with_a_note():
    args = load_arguments(ERAS / "llama_grpo_ptx_no_data.json")
    assert args.ptx_coeff == 0.0
    assert any(n.startswith("ptx_coeff=16 but no ptx_datasets") for n in args.notes)
    assert load_arguments(ERAS / "llama_grpo_ptx_no_data.json", overrides={"ptx_datasets": "p.jsonl"}).ptx_coeff == 16


def test_tp8_per_device_file_on_8_simulated_ranks_draws_32_prompts():
    derived = print_config(ERAS / "llama_grpo_tp8_per_device.json", world_size=8)["derived"]
    assert (derived["world_size"], derived["data_parallel_size"]) == (8, 1)
    assert (derived["prompts_per_step"], derived["sequences_per_step"], derived["prompts_per_rank"]) == (32, 256, 4)
    # PaddleNLP's mini-batch (8 x 32 sequences on its one data rank) split over ppokit's 8 ranks: 32 each, 4 x 8
    assert (derived["mini_batch_sequences_per_rank"], derived["gradient_accumulation_steps"]) == (32, 4)
    assert derived["optimizer_steps_per_rollout"] == 1 and derived["total_prompts"] == 50 * 32


def test_tp2_sharding4_ppo_on_8_ranks_draws_64_prompts_and_run_rl_is_run_ppo():
    derived = print_config(ERAS / "llama_ppo_tp2_sharding4.json", world_size=8, script="run_rl.py")["derived"]
    assert (derived["data_parallel_size"], derived["prompts_per_step"], derived["prompts_per_rank"]) == (4, 64, 8)
    assert (derived["mini_batch_sequences_per_rank"], derived["gradient_accumulation_steps"]) == (8, 2)
    args = load_arguments(ERAS / "llama_ppo_tp2_sharding4.json")
    assert batch_plan(args, 2).prompts_per_step == 16  # 2 ranks with TP 2: one data-parallel rank


def test_o2_without_bf16_runs_fp32_on_cpu_and_is_refused_on_a_gpu():
    args = load_arguments(ERAS / "qwen_grpo_o2_fp32.yaml", overrides={"device": "cpu"})
    assert args.fp16_opt_level == "O1" and not args.bf16
    assert any("training runs in float32 on this CPU" in n for n in args.notes)
    with pytest.raises(ConfigError, match="fp16_opt_level=O2 needs bf16 or fp16"):
        load_arguments(ERAS / "qwen_grpo_o2_fp32.yaml", overrides={"device": "cuda:0"})


def test_command_line_do_eval_0_wins_over_the_files_evaluation_strategy():
    path = ERAS / "qwen_vapo_gsm8k.yaml"
    args = load_arguments(path, argv=["--do_eval", "0"])
    assert (args.do_eval, args.evaluation_strategy) == (False, "no")
    assert f"do_eval=false from the command line wins over evaluation_strategy='steps' from {path}: no evaluation." \
        in args.notes
    same_file = load_arguments(overrides={"do_eval": False, "evaluation_strategy": "steps"})
    assert same_file.do_eval is True  # one source: PaddleNLP's rule, with a note
    assert any("evaluating anyway" in n for n in same_file.notes)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"min_dec_len": 64, "max_dec_len": 32}, "min_dec_len=64 is greater than max_dec_len=32"),
    ({"use_rm_server": True, "reward_server": "127.0.0.1:8731"}, "must start with http:// or https://"),
    ({"use_rm_server": True, "reward_server": "http://:8731"}, "names no host"),
    ({"use_rm_server": True, "reward_server": "http://localhost:87x1"}, "reward_server='http://localhost:87x1'"),
])
def test_late_mistakes_are_found_while_parsing(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("?", r"\?")):
        load_arguments(overrides=overrides)


def test_hub_dataset_names_stop_run_ppo_before_any_model_loads(tmp_path):
    config = tmp_path / "ppo.json"
    config.write_text(json.dumps({"train_datasets": "ppo-kk/34567ppl/train.jsonl", "ptx_datasets": "alpaca",
                                  "ptx_coeff": 16.0, "output_dir": str(tmp_path / "out")}))
    done = subprocess.run([sys.executable, "run_ppo.py", str(config)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "ptx_datasets='alpaca' is one of PaddleNLP's hub datasets" in done.stderr
    assert "import torch" not in done.stderr and "Loading" not in done.stderr
    shown = print_config(config)  # --print_config still shows the file, with the problem as a note
    assert any("training would stop here: ptx_datasets='alpaca'" in n for n in shown["notes"])


def test_resolved_config_derived_block_names_the_data_parallel_size():
    args = load_arguments(ERAS / "llama_grpo_tp8_per_device.json")
    assert resolved_config(args, world_size=16)["derived"]["data_parallel_size"] == 2
