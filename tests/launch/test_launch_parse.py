"""parse_launch_args: paddle.distributed.launch's arguments in, a LaunchSpec (or a sentence) out."""

import pytest

from ppokit.launch import LaunchError, LaunchSpec, parse_launch_args

PADDLE_LINE = ["--devices", "0,1,2,3,4,5,6,7", "run_ppo.py", "grpo_argument.json"]


def test_paddle_command_line_parses_unchanged():
    spec = parse_launch_args(PADDLE_LINE)
    assert spec == LaunchSpec(script="run_ppo.py", script_args=("grpo_argument.json",),
                              devices=tuple("01234567"), launcher="torchrun")


def test_script_arguments_pass_through_even_when_they_look_like_launcher_options():
    spec = parse_launch_args(["--devices", "0", "run_ppo.py", "c.json", "--devices", "x", "--max_steps", "3"])
    assert spec.devices == ("0",)
    assert spec.script_args == ("c.json", "--devices", "x", "--max_steps", "3")


def test_aliases_inline_values_and_dashed_spellings():
    spec = parse_launch_args(["--gpus=0,1", "--nproc-per-node", "2", "--node_rank", "0", "--nnodes=2",
                              "--master", "10.0.0.1:8090", "train.py"])
    assert (spec.devices, spec.nproc_per_node, spec.node_rank, spec.nnodes) == (("0", "1"), 2, 0, 2)
    assert (spec.master_addr, spec.master_port) == ("10.0.0.1", 8090)


def test_rank_is_the_node_rank_and_double_dash_ends_the_options():
    spec = parse_launch_args(["--rank", "1", "--nnodes", "2", "--master", "h:1", "--", "-weird.py", "a"])
    assert (spec.node_rank, spec.script, spec.script_args) == (1, "-weird.py", ("a",))


def test_accepted_paddle_options():
    spec = parse_launch_args(["--run_mode", "collective", "--job_id", "exp1", "--log_dir", "log",
                              "--dry_run", "run_ppo.py"])
    assert (spec.job_id, spec.log_dir, spec.dry_run) == ("exp1", "log", True)


def test_hostfile_selects_deepspeed_launcher():
    spec = parse_launch_args(["--hostfile", "hosts", "--nnodes", "2", "run_ppo.py"])
    assert (spec.launcher, spec.hostfile, spec.nnodes) == ("deepspeed", "hosts", 2)


@pytest.mark.parametrize("argv, words", [
    (["--master", "etcd://10.0.0.1:2379", "x.py"], ["only the IP:PORT form", "etcd://"]),
    (["--master", "10.0.0.1", "x.py"], ["IP:PORT", "10.0.0.1:8090"]),
    (["--run_mode", "ps", "x.py"], ["parameter-server", "collective"]),
    (["--run_mode", "pipeline", "x.py"], ["only mode is collective"]),
    (["--nnodes", "2", "x.py"], ["--master IP:PORT", "--rank"]),
    (["--nnodes", "2", "--master", "h:1", "--rank", "2", "x.py"], ["--rank 2", "0..1"]),
    (["--nnodes", "2:4", "x.py"], ["elastic", "--nnodes 2"]),
    (["--devices", "0,1", "--nproc_per_node", "4", "x.py"], ["disagrees", "2 GPU(s)"]),
    (["--devices", "0,0", "x.py"], ["GPU 0 twice"]),
    (["--devices", "0,,1", "x.py"], ["empty entry"]),
    (["--devices", "0", "--gpus", "1", "x.py"], ["--gpus repeats --devices"]),
    (["--devcies", "0", "x.py"], ["Did you mean --devices?"]),
    (["--ips", "10.0.0.1,10.0.0.2", "x.py"], ["--nnodes N --master IP:PORT"]),
    (["--nproc_per_node", "two", "x.py"], ["whole number", "'two'"]),
    (["--nproc_per_node", "0", "x.py"], ["at least 1"]),
    (["--devices", "0,1"], ["give the training script"]),
    (["--devices"], ["needs a value"]),
    (["--launcher", "mpirun", "x.py"], ["torchrun (default) or deepspeed"]),
    (["--launcher", "torchrun", "--hostfile", "h", "x.py"], ["DeepSpeed's launcher"]),
    (["--launcher", "deepspeed", "--nnodes", "2", "--master", "h:1", "x.py"], ["--hostfile"]),
])
def test_user_mistakes_are_sentences_naming_the_fix(argv, words):
    with pytest.raises(LaunchError) as err:
        parse_launch_args(argv)
    message = str(err.value)
    assert message.endswith((".", "?")) and "\n" not in message
    for word in words:
        assert word in message
