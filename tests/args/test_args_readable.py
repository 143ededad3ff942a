"""What a person reads: --print_config and `python -m ppokit.args list` put the model, data and algorithm first,
fold the keys that do nothing in this configuration, and name tool parameters with their types (issue 48 item 4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_print_config_reads_model_data_algorithm_first_and_folds_what_has_no_effect():
    done = run("run_ppo.py", "config/grpo_argument.json", "--print_config")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    keys = [line.split('"')[1] for line in lines if line.startswith('  "')]  # top-level keys, in printed order
    assert keys[0] == "actor_model_name_or_path" and keys.index("train_datasets") < keys.index("rl_algorithm") < \
        keys.index("global_batch_size") < keys.index("max_dec_len") < keys.index("use_rule_reward")
    assert keys[-3:] == ["derived", "notes", "no_effect_here"]
    shown = json.loads(done.stdout)
    for absent in ("critic_learning_rate", "per_device_value_batch_size", "kl_coeff", "judge_template", "lam",
                   "fused_linear", "tools"):  # GRPO: no critic, no KL in the reward, no judge, no GAE, no tools
        assert absent not in shown, absent
    folded = shown["no_effect_here"]
    assert "per_device_value_batch_size=" in folded["no critic: rl_algorithm=grpo trains none"]
    assert "kl_coeff=0.02" in "".join(folded.values()) and "fused_linear=true" in "".join(folded.values())
    assert "critic_lr_schedule" not in shown["derived"]
    assert len(lines) < 200, len(lines)  # was 277, the model at line 211


def test_print_config_keeps_the_critic_of_ppo():
    done = run("run_ppo.py", "config/ppo_argument.json", "--print_config")
    shown = json.loads(done.stdout)
    assert "critic_learning_rate" in shown and "kl_coeff" in shown and "lam" in shown


def test_args_list_by_section_with_types_and_no_effect_keys_last():
    done = run("-m", "ppokit.args", "list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "## model" and lines[1].startswith("actor_model_name_or_path (str or null): ")
    headers = [line for line in lines if line.startswith("## ")]
    assert headers[:7] == ["## model", "## data", "## algorithm", "## batch", "## lengths", "## rewards", "## tools"]
    assert headers[-1].startswith("## accepted for PaddleNLP compatibility, no effect in ppokit")
    described = [line.split(" ")[0] for line in lines if " (" in line and not line.startswith("#")]
    first_ten = described[:10]
    assert "fused_linear" not in first_ten and "use_fused_rope" not in first_ten
    assert "fused_linear" in lines[-1] and not any(k.startswith("fused_linear") for k in described)
