"""main(): dry runs, user errors, exit codes, and real 2-process gloo runs on this CPU."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit import launch
from ppokit.launch import Machine, main, run_command

REPO = Path(__file__).resolve().parents[2]
ECHO = str(Path(__file__).with_name("echo_rank.py").relative_to(REPO))


@pytest.fixture
def cpu_machine(monkeypatch):
    monkeypatch.setattr(launch, "detect_machine", lambda: Machine(gpu_count=0, cpu_count=4))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


def test_dry_run_prints_the_command_and_the_cpu_note(cpu_machine, capsys):
    assert main(["--dry_run", "--devices", "0,1", "missing.py", "cfg.json"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == (f"OMP_NUM_THREADS=2 {sys.executable} -m torch.distributed.run --standalone "
                           "--nnodes 1 --nproc_per_node 2 missing.py cfg.json")
    assert err.count("gloo") == 1


def test_user_mistake_exits_2_with_a_sentence(cpu_machine, capsys):
    assert main(["--master", "etcd://10.0.0.1:2379", "run_ppo.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ppokit.launch: error: --master etcd://10.0.0.1:2379: only the IP:PORT form")
    assert "Traceback" not in err


def test_missing_script_is_reported_before_starting(cpu_machine, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--nproc_per_node", "2", "no_such_script.py"]) == 2
    assert "cannot find the training script 'no_such_script.py'" in capsys.readouterr().err


def test_help_lists_the_options(capsys):
    assert main(["--help"]) == 0
    assert "--devices, --gpus" in capsys.readouterr().out


def test_run_command_forwards_the_exit_status():
    assert run_command([sys.executable, "-c", "import sys; sys.exit(3)"], {}) == 3


def _launch(*argv):
    return subprocess.run([sys.executable, "-m", "ppokit.launch", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def _rank0_lines(stdout):
    return dict(re.match(r"(\w+)=(.*)$", line).groups() for line in stdout.splitlines() if re.match(r"\w+=", line))


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_two_processes_all_reduce_over_gloo(launcher):
    done = _launch("--launcher", launcher, "--nproc_per_node", "2", ECHO, "cfg.json", "--max_steps", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = _rank0_lines(done.stdout)
    assert lines["sum"] == "1" and lines["world_size"] == "2"
    assert json.loads(lines["args"]) == ["cfg.json", "--max_steps", "3"]  # no --local_rank injected
    assert lines["local_rank_env"] == "0"


def test_a_failing_worker_fails_the_launch(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import sys\nsys.exit(3)\n")
    done = _launch("--nproc_per_node", "1", str(script))
    assert done.returncode != 0
