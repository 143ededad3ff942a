"""Command-line parsing, parse_cli, --print_config, and `python -m ppokit.args` (some via subprocess)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.args import ConfigError, explain, load_arguments, parse_cli
from ppokit.args.argv import argv_to_dict

ROOT = Path(__file__).resolve().parents[2]

GRPO = str(ROOT / "config" / "grpo_argument.json")


def run(*argv, cwd=ROOT):
    return subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("argv", "expected"), [
    (["--bf16"], True), (["--bf16", "false"], False), (["--bf16=0"], False), (["--bf16", "yes"], True),
    (["--bf16", "1"], True), (["--bf16", "no"], False), (["--no_bf16"], False), (["--bf16", "true", "--no_bf16"], False),
])
def test_boolean_forms(argv, expected):
    assert load_arguments(argv=argv).bf16 is expected


@pytest.mark.parametrize(("argv", "expected"), [
    (["--report_to", "wandb", "tensorboard"], ["wandb", "tensorboard"]),
    (["--report_to", "wandb,tensorboard"], ["wandb", "tensorboard"]),
    (["--report_to=[\"wandb\"]"], ["wandb"]),
    (["--report_to", "visualdl"], ["visualdl"]),
])
def test_list_forms(argv, expected):
    assert load_arguments(argv=argv).report_to == expected


def test_list_of_numbers_and_none_words():
    args = load_arguments(argv=["--reward_weights", "[0.5, 2]", "--critic_learning_rate", "None",
                                "--eval_mode", "null", "--offload_level", "freeze_model optimizer"])
    assert args.reward_weights == [0.5, 2.0] and args.critic_learning_rate is None and args.eval_mode is None
    assert args.offload_level == ["freeze_model", "optimizer"]
    assert load_arguments(argv=["--reward_weights", "1,0.5"]).reward_weights == [1.0, 0.5]


def test_values_and_negative_numbers():
    args = load_arguments(argv=["--global_batch_size", "4", "--global_mini_batch_size", "-1", "--learning_rate=2e-6",
                                "--resume_from_checkpoint", "true", "--rl_algorithm", "grpo", "--rollout_n", "2"])
    assert (args.global_batch_size, args.global_mini_batch_size, args.learning_rate) == (4, 4, 2e-6)
    assert args.resume_from_checkpoint is True
    assert load_arguments(argv=["--resume_from_checkpoint", "out/checkpoint-3"]).resume_from_checkpoint == "out/checkpoint-3"
    assert load_arguments(argv=["--resume_from_checkpoint"]).resume_from_checkpoint is True


def test_old_names_on_the_command_line():
    args = load_arguments(argv=["--num_return_sequences", "4", "--max_seq_len=1024", "--global_batch_size", "2"])
    assert args.rollout_n == 4 and args.max_length == 1024


@pytest.mark.parametrize(("argv", "message"), [
    (["--kl_loss", "0.1"], "command line: unknown option '--kl_loss'; did you mean --kl_loss_type?"),
    (["--rollout", "4"], "command line: unknown option '--rollout'; did you mean --rollout_n?"),
    (["--no_seed"], "command line: unknown option '--no_seed'; did you mean --seed?"),
    (["--no_bf16", "1"], "command line: --no_bf16 takes no value (it sets bf16 to false)."),
    (["--seed"], "command line: --seed needs a value."),
    (["--seed", "1", "2"], "command line: --seed takes one value, got 2: 1 2."),
    (["seed", "1"], "command line: unexpected value 'seed'; options look like --key value."),
    (["--seed=1", "2"], "command line: unexpected value '2'; options look like --key value."),
    (["--reward_weights", "[1,"], "command line: --reward_weights: '[1,' is not a JSON list (Expecting value)."),
])
def test_command_line_mistakes(argv, message):
    values, errors = argv_to_dict(argv)
    assert errors == [message]


def test_no_prefix_abbreviations():
    with pytest.raises(ConfigError, match="unknown option '--max_step'; did you mean --max_steps"):
        load_arguments(argv=["--max_step", "3"])


def test_parse_cli_print_config_in_process(capsys):
    with pytest.raises(SystemExit) as info:
        parse_cli([GRPO, "--max_steps", "10", "--print_config"])
    assert info.value.code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_steps"] == 10 and out["rollout_n"] == 4 and out["learning_rate"] == 2e-5
    assert out["derived"]["total_prompts"] == 80 and out["derived"]["gradient_accumulation_steps"] == 2
    assert out["notes"] == ["KL to the reference model is off (kl_loss_coeff=0): no reference model is needed."]


def test_parse_cli_returns_arguments_and_reports_errors(capsys):
    assert parse_cli([GRPO, "--seed", "7"]).seed == 7
    with pytest.raises(SystemExit) as info:
        parse_cli([GRPO, "--seed", "x"])
    assert info.value.code == 2 and capsys.readouterr().err.startswith("error: command line: seed='x'")
    with pytest.raises(SystemExit) as info:
        parse_cli(["--seed", "1"])
    assert info.value.code == 2 and "no argument file given." in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        parse_cli(["--help"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("usage: python run_ppo.py")


def test_explain_in_process():
    text = explain("rollout_n")
    assert text.splitlines()[:3] == ["rollout_n: Responses sampled per prompt (formerly num_return_sequences).",
                                     "  type: int", "  default: 1"]
    assert "  aliases: num_return_sequences" in text and "  group: TrainingArguments" in text
    assert explain("num_return_sequences").startswith(
        "num_return_sequences: the PaddleNLP E0-E4 name of rollout_n; read as rollout_n.")
    assert ("  ppokit: accepted for PaddleNLP compatibility; no effect here, because ppokit runs PyTorch/transformers "
            "kernels.") in explain("fused_linear")
    assert "  group: PpokitArguments" in explain("loss_agg_mode")
    with pytest.raises(ConfigError, match="unknown key 'kl_loss_coef'; did you mean kl_loss_coeff?"):
        explain("kl_loss_coef")


def print_config_importing_nothing_heavy(config: str):
    """`run_ppo.py CONFIG --print_config` in a child that fails when torch, transformers or deepspeed got imported."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['run_ppo.py', {config!r}, '--print_config']\n"
            "try:\n    runpy.run_path('run_ppo.py', run_name='__main__')\n"
            "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            "heavy = [m for m in ('torch', 'transformers', 'deepspeed') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    return run("-c", code)


def test_print_config_subprocess_imports_nothing_heavy():
    result = print_config_importing_nothing_heavy("config/grpo_argument.json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["rl_algorithm"] == "grpo" and out["derived"]["sequences_per_step"] == 32
    assert out["derived"]["optimizer_steps_per_rollout"] == 1 and out["derived"]["mode"] == "global"


def test_typo_subprocess_exits_2_with_suggestion(tmp_path):
    result = run("run_ppo.py", GRPO, "--kl_loss_coef", "0.1")
    assert result.returncode == 2
    assert "did you mean --kl_loss_coeff?" in result.stderr and "Traceback" not in result.stderr
    path = tmp_path / "typo.json"
    path.write_text('{"kl_loss_coef": 0.1}')
    result = run("run_ppo.py", str(path), "--print_config")
    assert result.returncode == 2 and result.stdout == ""
    assert f"error: {path}: unknown key 'kl_loss_coef'; did you mean kl_loss_coeff?" in result.stderr
    assert "Traceback" not in result.stderr


def test_module_explain_subprocess():
    result = run("-m", "ppokit.args", "explain", "max_steps")
    assert result.returncode == 0 and "counted optimizer steps" in result.stdout
    result = run("-m", "ppokit.args", "explain", "rolout_n")
    assert result.returncode == 2 and "did you mean rollout_n?" in result.stderr and "Traceback" not in result.stderr


def test_print_config_of_a_tool_run_names_its_tools():
    result = print_config_importing_nothing_heavy("config/grpo_tools_argument.json")
    assert result.returncode == 0, result.stderr
    tools = json.loads(result.stdout)["derived"]["tools"]
    assert list(tools) == ["multiply"] and tools["multiply"].startswith("multiply(a: integer, b: integer): ")
