"""build_command: exact command lines and environments for the layouts users run."""

import sys

import pytest

from ppokit.launch import (
    LaunchError,
    Machine,
    build_command,
    format_command,
    launch_notes,
    parse_launch_args,
)

PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run"]
DEEPSPEED = [PY, "-m", "deepspeed.launcher.runner"]
GPU8 = Machine(gpu_count=8, cpu_count=64)
CPU16 = Machine(gpu_count=0, cpu_count=16)
SCRIPT = ["run_ppo.py", "grpo_argument.json"]


def build(argv, machine=GPU8, env=None):
    return build_command(parse_launch_args(argv), env or {}, machine)


def test_one_gpu():
    argv, env = build(["--devices", "0", *SCRIPT])
    assert argv == [*TORCHRUN, "--standalone", "--nnodes", "1", "--nproc_per_node", "1", *SCRIPT]
    assert env == {"CUDA_VISIBLE_DEVICES": "0"}


def test_eight_gpus_one_node_from_the_paddle_command_line():
    argv, env = build(["--devices", "0,1,2,3,4,5,6,7", *SCRIPT, "--max_steps", "10"])
    assert argv == [*TORCHRUN, "--standalone", "--nnodes", "1", "--nproc_per_node", "8", *SCRIPT,
                    "--max_steps", "10"]
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}


def test_two_nodes_master_and_rank_one():
    argv, env = build(["--devices", "0,1,2,3,4,5,6,7", "--nnodes", "2", "--master", "10.0.0.1:8090",
                       "--rank", "1", *SCRIPT])
    assert argv == [*TORCHRUN, "--nnodes", "2", "--nproc_per_node", "8", "--node_rank", "1",
                    "--master_addr", "10.0.0.1", "--master_port", "8090", *SCRIPT]
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}


def test_two_nodes_without_rank_use_c10d_rendezvous_named_by_job_id():
    argv, _ = build(["--nnodes", "2", "--master", "10.0.0.1:8090", "--job_id", "exp1", *SCRIPT])
    assert argv == [*TORCHRUN, "--nnodes", "2", "--nproc_per_node", "8", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", "10.0.0.1:8090", "--rdzv_id", "exp1", *SCRIPT]


def test_one_node_with_master_uses_that_port_and_log_dir_tees_each_rank():
    argv, _ = build(["--devices", "0,1", "--master", "127.0.0.1:29600", "--log_dir", "log", *SCRIPT])
    assert argv == [*TORCHRUN, "--nnodes", "1", "--nproc_per_node", "2", "--node_rank", "0",
                    "--master_addr", "127.0.0.1", "--master_port", "29600", "--log_dir", "log", "--tee", "3",
                    *SCRIPT]


def test_no_devices_means_every_visible_gpu_and_nproc_takes_the_first():
    assert build([*SCRIPT])[1] == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    argv, env = build(["--nproc_per_node", "2", *SCRIPT])
    assert argv[argv.index("--nproc_per_node") + 1] == "2" and env == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_inherited_visible_devices_bound_the_choice():
    env = {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "PATH": "/bin"}
    four = Machine(gpu_count=4)
    assert build(["--devices", "4,5", *SCRIPT], four, env)[1] == {"CUDA_VISIBLE_DEVICES": "4,5", "PATH": "/bin"}
    assert build(["--nproc_per_node", "2", *SCRIPT], four, env)[1]["CUDA_VISIBLE_DEVICES"] == "4,5"
    with pytest.raises(LaunchError, match=r"GPU 0, which this job cannot use \(CUDA_VISIBLE_DEVICES=4,5,6,7\)"):
        build(["--devices", "0,4", *SCRIPT], four, env)
    assert env == {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "PATH": "/bin"}  # the input is not changed


def test_asking_for_more_gpus_than_exist_is_an_error():
    with pytest.raises(LaunchError, match="GPU 9, which this job cannot use"):
        build(["--devices", "0,9", *SCRIPT])
    with pytest.raises(LaunchError, match="only 8 are visible"):
        build(["--nproc_per_node", "16", *SCRIPT])


def test_deepspeed_one_node_names_the_gpus_with_include():
    argv, env = build(["--launcher", "deepspeed", "--devices", "2,3", "--master", "127.0.0.1:29600",
                       "--log_dir", "log", *SCRIPT], env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert argv == [*DEEPSPEED, "--include", "localhost:2,3", "--master_port", "29600", "--no_local_rank",
                    "--enable_each_rank_log", "log", *SCRIPT]
    assert env == {}


def test_deepspeed_hostfile_starts_every_node_from_here():
    argv, env = build(["--hostfile", "hostfile", "--nnodes", "2", "--devices", "0,1,2,3,4,5,6,7",
                       "--master", "10.0.0.1:8090", *SCRIPT])
    assert argv == [*DEEPSPEED, "--hostfile", "hostfile", "--num_nodes", "2", "--num_gpus", "8",
                    "--master_addr", "10.0.0.1", "--master_port", "8090", "--no_local_rank", *SCRIPT]
    assert env == {}


def test_deepspeed_hostfile_alone_lets_slots_decide_and_rank_means_no_ssh():
    assert build(["--hostfile", "h", *SCRIPT], CPU16)[0] == [*DEEPSPEED, "--hostfile", "h", "--no_local_rank",
                                                             *SCRIPT]
    argv, _ = build(["--hostfile", "h", "--nnodes", "2", "--rank", "1", "--master", "10.0.0.1:8090", *SCRIPT])
    assert argv == [*DEEPSPEED, "--hostfile", "h", "--num_nodes", "2", "--master_addr", "10.0.0.1",
                    "--master_port", "8090", "--no_ssh", "--node_rank", "1", "--no_local_rank", *SCRIPT]


def test_deepspeed_hostfile_needs_leading_gpus():
    with pytest.raises(LaunchError, match="first GPUs of each host"):
        build(["--hostfile", "h", "--devices", "2,3", *SCRIPT])


def test_cpu_machine_counts_devices_and_shares_cores():
    argv, env = build(["--devices", "0,1", *SCRIPT], CPU16)
    assert argv == [*TORCHRUN, "--standalone", "--nnodes", "1", "--nproc_per_node", "2", *SCRIPT]
    assert env == {"OMP_NUM_THREADS": "8"}
    assert build(["--devices", "0,1", *SCRIPT], CPU16, {"OMP_NUM_THREADS": "3"})[1] == {"OMP_NUM_THREADS": "3"}
    assert build([*SCRIPT], CPU16) == ([*TORCHRUN, "--standalone", "--nnodes", "1", "--nproc_per_node", "1",
                                        *SCRIPT], {})


def test_cpu_machine_deepspeed_uses_a_process_count():
    argv, env = build(["--launcher", "deepspeed", "--nproc_per_node", "2", *SCRIPT], CPU16)
    assert argv == [*DEEPSPEED, "--num_gpus", "2", "--no_local_rank", *SCRIPT]
    assert env == {"OMP_NUM_THREADS": "8"}


def test_notes_say_cpu_and_gloo_once_and_explain_job_id():
    notes = launch_notes(parse_launch_args(["--devices", "0,1", *SCRIPT]), CPU16)
    assert len(notes) == 1 and "gloo" in notes[0] and '--devices "0,1" only sets how many' in notes[0]
    assert launch_notes(parse_launch_args(["--devices", "0,1", *SCRIPT]), GPU8) == []
    ignored = launch_notes(parse_launch_args(["--job_id", "j", *SCRIPT]), GPU8)
    assert ignored == ["--job_id j is accepted for paddle.distributed.launch compatibility and has no effect here."]


def test_format_command_shows_only_environment_changes():
    line = format_command(["python", "a b.py"], {"A": "1", "C": "x y"}, {"A": "1", "B": "2"})
    assert line == "env -u B C='x y' python 'a b.py'"
    assert format_command(["python", "x.py"], {"A": "1"}, {"A": "1"}) == "python x.py"
