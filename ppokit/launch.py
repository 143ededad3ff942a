"""Multi-process launcher that speaks ``paddle.distributed.launch``'s arguments.

    python -m ppokit.launch --devices "0,1,2,3,4,5,6,7" run_ppo.py grpo_argument.json [--key value ...]

Everything before the training script is a launcher option; the script and everything after it are
passed through unchanged. The launcher chooses the visible GPUs (``CUDA_VISIBLE_DEVICES``) and
starts one process per GPU through torchrun (default) or DeepSpeed's launcher (``--launcher
deepspeed``; several nodes from one command with ``--hostfile``). Without a CUDA GPU, ``--devices``
only sets the number of processes, which run on the CPU and talk over gloo.

Pure core, thin shell: ``parse_launch_args(argv) -> LaunchSpec`` and ``build_command(spec, env,
machine) -> (argv, env)`` do no I/O; ``main(argv)`` detects the machine, prints notes, and runs the
command (or prints it with ``--dry_run``), returning the launcher's exit status. See docs/scaling.md.
"""

from __future__ import annotations

import difflib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ppokit.errors import PpokitError

PROG = "python -m ppokit.launch"
VISIBLE = "CUDA_VISIBLE_DEVICES"
TORCHRUN = ("-m", "torch.distributed.run")
DEEPSPEED = ("-m", "deepspeed.launcher.runner")
EXAMPLE = f'{PROG} --devices "0,1" run_ppo.py grpo_argument.json'

USAGE = f"""usage: {PROG} [options] SCRIPT [script arguments ...]

Starts SCRIPT once per GPU (or --nproc_per_node times on a CPU-only machine) through torchrun,
or through DeepSpeed's launcher. Options (paddle.distributed.launch's names):
  --devices, --gpus IDS     GPUs to use, e.g. "0,1,2,3" (one process each); sets CUDA_VISIBLE_DEVICES
  --nproc_per_node N        processes on this node (default: one per --devices entry, else all GPUs, else 1)
  --nnodes N                number of nodes (default 1)
  --master IP:PORT          node 0's address and a free port (several nodes; optional on one)
  --rank, --node_rank R     this node's index 0..N-1 (several nodes; without it torchrun's c10d
                            rendezvous numbers the nodes as they join)
  --log_dir DIR             also write each rank's stdout/stderr to files under DIR
  --job_id NAME             accepted; names the rendezvous when nodes join without --rank
  --run_mode collective     the only mode (ps / rpc are refused)
  --launcher torchrun|deepspeed   process starter (default torchrun; deepspeed with --hostfile)
  --hostfile FILE           DeepSpeed hostfile ("host slots=8" lines): start every node from here
  --dry_run                 print the command instead of running it
Example: {EXAMPLE}
"""


class LaunchError(PpokitError, ValueError):
    """A mistake in the launcher's arguments; the message is a sentence the user can act on."""


@dataclass(frozen=True)
class LaunchSpec:
    """What the user asked for, parsed but not yet resolved against a machine."""

    script: str
    script_args: tuple[str, ...] = ()
    devices: tuple[str, ...] | None = None
    nproc_per_node: int | None = None
    nnodes: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    node_rank: int | None = None
    log_dir: str | None = None
    job_id: str | None = None
    launcher: str = "torchrun"
    hostfile: str | None = None
    dry_run: bool = False


@dataclass(frozen=True)
class Machine:
    """Facts about this machine that the command depends on (see ``detect_machine``)."""

    gpu_count: int
    cpu_count: int = 1


# launcher option -> (field it fills, whether it takes a value)
_OPTIONS: dict[str, tuple[str, bool]] = {
    "devices": ("devices", True), "gpus": ("devices", True), "nproc_per_node": ("nproc_per_node", True),
    "nnodes": ("nnodes", True), "master": ("master", True), "rank": ("node_rank", True),
    "node_rank": ("node_rank", True), "log_dir": ("log_dir", True), "job_id": ("job_id", True),
    "run_mode": ("run_mode", True), "launcher": ("launcher", True), "hostfile": ("hostfile", True),
    "dry_run": ("dry_run", False), "help": ("help", False), "h": ("help", False),
}

_PS = ("parameter-server training is a PaddlePaddle mode with no PyTorch counterpart here; ppokit trains "
       "data-parallel (collective) only, so drop this option")
_REFUSED: dict[str, str] = {
    "ips": "it is the old multi-node form; give --nnodes N --master IP:PORT and --rank R on each node "
           "instead (or a DeepSpeed --hostfile)",
    "xpus": "it selects Kunlun XPUs, which PyTorch does not drive; use --devices with CUDA GPUs",
    "servers": _PS, "trainers": _PS, "server_num": _PS, "trainer_num": _PS, "heter_workers": _PS,
}


def _scan(argv: Sequence[str]) -> tuple[dict[str, object], str | None, tuple[str, ...]]:
    """Split argv into launcher options (field -> raw value), the script, and the script's arguments."""
    raw: dict[str, object] = {}
    seen: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        token = argv[i]
        if token == "--":
            i += 1
            break
        name, has_inline, inline = token.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name in _REFUSED:
            raise LaunchError(f"{token.split('=')[0]} is not supported: {_REFUSED[name]}.")
        if name not in _OPTIONS:
            raise LaunchError(_unknown_option(token))
        dest, takes_value = _OPTIONS[name]
        if dest in seen:
            raise LaunchError(f"--{name} repeats --{seen[dest]}; give it once.")
        seen[dest] = name
        if not takes_value:
            raw[dest] = True
        elif has_inline:
            raw[dest] = inline
        elif i + 1 < len(argv):
            i += 1
            raw[dest] = argv[i]
        else:
            raise LaunchError(f"--{name} needs a value, e.g. {EXAMPLE}.")
        i += 1
    script = argv[i] if i < len(argv) else None
    return raw, script, tuple(argv[i + 1:])


def _unknown_option(token: str) -> str:
    name = token.lstrip("-").split("=")[0].replace("-", "_")
    close = difflib.get_close_matches(name, [*_OPTIONS, *_REFUSED], n=1)
    hint = f" Did you mean --{close[0]}?" if close else ""
    return (f"{token.split('=')[0]} is not a launcher option.{hint} Launcher options go before the "
            f"script; the script's own options go after it (`{PROG} --help` lists them).")


def _int(raw: object, option: str, minimum: int) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        raise LaunchError(f"--{option} must be a whole number, got {raw!r}.") from None
    if value < minimum:
        raise LaunchError(f"--{option} must be at least {minimum}, got {value}.")
    return value


def _devices(raw: str) -> tuple[str, ...]:
    ids = tuple(part.strip() for part in raw.split(","))
    if not raw.strip() or any(not part for part in ids):
        raise LaunchError(f'--devices {raw!r} has an empty entry; list GPU ids separated by commas, e.g. "0,1,2,3".')
    repeated = sorted({d for d in ids if ids.count(d) > 1})
    if repeated:
        raise LaunchError(f"--devices lists GPU {', '.join(repeated)} twice; each process needs its own GPU.")
    return ids


def _master(raw: str) -> tuple[str, int]:
    if "://" in raw:
        scheme = raw.split("://")[0]
        raise LaunchError(f"--master {raw}: only the IP:PORT form is supported, not {scheme}:// (there is no "
                          f"{scheme} rendezvous here); give node 0's address and a free port, e.g. --master 10.0.0.1:8090.")
    host, _, port = raw.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise LaunchError(f"--master {raw!r} must be IP:PORT (node 0's address and a free port), e.g. 10.0.0.1:8090.")
    return host.strip("[]"), int(port)


def _nnodes(raw: str) -> int:
    if ":" in raw:
        raise LaunchError(f"--nnodes {raw}: elastic node ranges are not supported; give the fixed number of nodes, "
                          "e.g. --nnodes 2.")
    return _int(raw, "nnodes", 1)


def _launcher(raw: dict[str, object]) -> str:
    launcher = str(raw.get("launcher") or ("deepspeed" if raw.get("hostfile") else "torchrun"))
    if launcher not in ("torchrun", "deepspeed"):
        raise LaunchError(f"--launcher {launcher!r} is unknown; choose torchrun (default) or deepspeed.")
    if raw.get("hostfile") and launcher != "deepspeed":
        raise LaunchError("--hostfile is read by DeepSpeed's launcher; drop --launcher torchrun (or the hostfile "
                          "and run the torchrun command on each node with --rank).")
    return launcher


def _run_mode(raw: dict[str, object]) -> None:
    mode = str(raw.get("run_mode", "collective"))
    if mode in ("ps", "ps_heter", "ps-heter", "rpc"):
        raise LaunchError(f"--run_mode {mode} is not supported: {_PS}.")
    if mode != "collective":
        raise LaunchError(f"--run_mode {mode!r} is unknown; the only mode is collective (data-parallel).")


def parse_launch_args(argv: Sequence[str]) -> LaunchSpec:
    """Parse ``paddle.distributed.launch``-style arguments into a LaunchSpec; raises LaunchError.

    Pure: reads no files and no environment. Checks that need the machine (which GPUs exist)
    happen in ``build_command``.
    """
    raw, script, script_args = _scan(argv)
    if script is None:
        raise LaunchError(f"give the training script after the launcher options, e.g. {EXAMPLE}.")
    _run_mode(raw)
    master = _master(str(raw["master"])) if "master" in raw else (None, None)
    spec = LaunchSpec(
        script=script, script_args=script_args,
        devices=_devices(str(raw["devices"])) if "devices" in raw else None,
        nproc_per_node=_int(raw["nproc_per_node"], "nproc_per_node", 1) if "nproc_per_node" in raw else None,
        nnodes=_nnodes(str(raw["nnodes"])) if "nnodes" in raw else 1,
        master_addr=master[0], master_port=master[1],
        node_rank=_int(raw["node_rank"], "rank", 0) if "node_rank" in raw else None,
        log_dir=str(raw["log_dir"]) if "log_dir" in raw else None,
        job_id=str(raw["job_id"]) if "job_id" in raw else None,
        launcher=_launcher(raw), hostfile=str(raw["hostfile"]) if "hostfile" in raw else None,
        dry_run=bool(raw.get("dry_run", False)),
    )
    _check_spec(spec)
    return spec


def _check_spec(spec: LaunchSpec) -> None:
    """Cross-option checks that need no machine facts."""
    if spec.devices is not None and spec.nproc_per_node not in (None, len(spec.devices)):
        raise LaunchError(f"--nproc_per_node {spec.nproc_per_node} disagrees with --devices, which lists "
                          f"{len(spec.devices)} GPU(s); each process uses one GPU, so give one of the two.")
    if spec.node_rank is not None and spec.node_rank >= spec.nnodes:
        raise LaunchError(f"--rank {spec.node_rank} is out of range for --nnodes {spec.nnodes}; node ranks run "
                          f"0..{spec.nnodes - 1}.")
    if spec.hostfile:
        return
    if spec.nnodes > 1 and spec.launcher == "deepspeed":
        raise LaunchError("DeepSpeed's launcher needs a --hostfile (lines like `node1 slots=8`) to start several "
                          "nodes; or use the default torchrun launcher with --master and --rank on each node.")
    if spec.nnodes > 1 and spec.master_addr is None:
        raise LaunchError(f"--nnodes {spec.nnodes} needs --master IP:PORT, node 0's address and a free port, "
                          "given identically on every node (plus --rank R for each node's index).")


def build_command(spec: LaunchSpec, env: Mapping[str, str],
                  machine: Machine | None = None) -> tuple[list[str], dict[str, str]]:
    """The command that starts ``spec`` and the environment to run it in; raises LaunchError.

    Pure given ``machine`` (``None`` detects this machine). The first element is this Python
    (``sys.executable``), which runs ``-m torch.distributed.run`` or ``-m deepspeed.launcher.runner``.
    """
    machine = detect_machine() if machine is None else machine
    out = dict(env)
    nproc, gpu_ids = _processes(spec, env, machine)
    if spec.launcher == "deepspeed":
        argv = _deepspeed_argv(spec, nproc, gpu_ids, cpu=gpu_ids is None)
        if gpu_ids is not None:
            out.pop(VISIBLE, None)  # --include names the GPUs; DeepSpeed would only warn about it
    else:
        argv = _torchrun_argv(spec, nproc)
        if gpu_ids is not None:
            out[VISIBLE] = ",".join(gpu_ids)
    if machine.gpu_count == 0 and not spec.hostfile and nproc and nproc > 1 and "OMP_NUM_THREADS" not in env:
        # torchrun would pin every CPU worker to one thread; share the cores instead
        out["OMP_NUM_THREADS"] = str(max(1, machine.cpu_count // nproc))
    return argv, out


def _processes(spec: LaunchSpec, env: Mapping[str, str], machine: Machine) -> tuple[int | None, list[str] | None]:
    """(processes on this node, GPU ids to use); GPU ids are None on a CPU-only machine, and both
    may be None with a hostfile, whose ``slots`` then decide."""
    if spec.hostfile:  # the GPUs are on the hosts in the file, not necessarily on this machine
        count = spec.nproc_per_node or (len(spec.devices) if spec.devices else None)
        return count, list(spec.devices) if spec.devices else None
    if machine.gpu_count == 0:
        return spec.nproc_per_node or len(spec.devices or ()) or 1, None
    inherited = env.get(VISIBLE, "").strip()
    available = [d.strip() for d in inherited.split(",")] if inherited else [str(i) for i in range(machine.gpu_count)]
    where = f"{VISIBLE}={inherited}" if inherited else f"this machine has {machine.gpu_count}: 0..{machine.gpu_count - 1}"
    if spec.devices is not None:
        missing = [d for d in spec.devices if d not in available]
        if missing:
            raise LaunchError(f"--devices asks for GPU {', '.join(missing)}, which this job cannot use ({where}); "
                              "list GPUs from that set.")
        return len(spec.devices), list(spec.devices)
    wanted = spec.nproc_per_node or len(available)
    if wanted > len(available):
        raise LaunchError(f"--nproc_per_node {wanted} needs {wanted} GPUs, but only {len(available)} are visible "
                          f"({where}); start at most {len(available)}.")
    return wanted, available[:wanted]


def _torchrun_argv(spec: LaunchSpec, nproc: int | None) -> list[str]:
    argv = [sys.executable, *TORCHRUN, "--nnodes", str(spec.nnodes), "--nproc_per_node", str(nproc)]
    if spec.nnodes == 1 and spec.master_addr is None:
        argv.insert(len(TORCHRUN) + 1, "--standalone")
    elif spec.node_rank is None and spec.nnodes > 1:
        argv += ["--rdzv_backend", "c10d", "--rdzv_endpoint", f"{spec.master_addr}:{spec.master_port}",
                 "--rdzv_id", spec.job_id or "ppokit"]
    else:
        argv += ["--node_rank", str(spec.node_rank or 0), "--master_addr", str(spec.master_addr),
                 "--master_port", str(spec.master_port)]
    if spec.log_dir:
        argv += ["--log_dir", spec.log_dir, "--tee", "3"]
    return [*argv, spec.script, *spec.script_args]


def _deepspeed_argv(spec: LaunchSpec, nproc: int | None, gpu_ids: list[str] | None, cpu: bool) -> list[str]:
    argv = [sys.executable, *DEEPSPEED]
    if spec.hostfile:
        argv += ["--hostfile", spec.hostfile]
        if spec.nnodes > 1:
            argv += ["--num_nodes", str(spec.nnodes)]
    argv += _deepspeed_slots(spec, nproc, gpu_ids, cpu)
    if spec.master_addr is not None:
        if spec.hostfile:
            argv += ["--master_addr", spec.master_addr]
        argv += ["--master_port", str(spec.master_port)]
    if spec.hostfile and spec.node_rank is not None:
        argv += ["--no_ssh", "--node_rank", str(spec.node_rank)]
    argv.append("--no_local_rank")  # ranks read LOCAL_RANK from the environment, as under torchrun
    if spec.log_dir:
        argv += ["--enable_each_rank_log", spec.log_dir]
    return [*argv, spec.script, *spec.script_args]


def _deepspeed_slots(spec: LaunchSpec, nproc: int | None, gpu_ids: list[str] | None, cpu: bool) -> list[str]:
    """DeepSpeed's per-node resource flags: --include for named local GPUs, --num_gpus for a count."""
    if cpu or spec.hostfile:
        if gpu_ids is not None and gpu_ids != [str(i) for i in range(len(gpu_ids))]:
            raise LaunchError(f"with --hostfile, --devices must be the first GPUs of each host (0..k-1), got "
                              f"{','.join(gpu_ids)}; give --nproc_per_node k, or edit the hostfile's slots.")
        return ["--num_gpus", str(nproc)] if nproc else []
    return ["--include", "localhost:" + ",".join(gpu_ids or [])]


def launch_notes(spec: LaunchSpec, machine: Machine) -> list[str]:
    """One-line notes for the user about how their options were read (printed once by main)."""
    notes = []
    if machine.gpu_count == 0 and not spec.hostfile:
        count = spec.nproc_per_node or len(spec.devices or ()) or 1
        devices = (f'; --devices "{",".join(spec.devices)}" only sets how many, its GPU ids are ignored'
                   if spec.devices else "")
        what = "the process runs" if count == 1 else f"the {count} processes run"
        notes.append(f"no CUDA GPU is visible, so {what} on the CPU with the gloo backend{devices}.")
    if spec.job_id is not None:
        used = spec.launcher == "torchrun" and spec.nnodes > 1 and spec.node_rank is None
        notes.append(f"--job_id {spec.job_id} " + ("names torchrun's c10d rendezvous." if used else
                     "is accepted for paddle.distributed.launch compatibility and has no effect here."))
    return notes


def format_command(argv: Sequence[str], env: Mapping[str, str], base_env: Mapping[str, str]) -> str:
    """A shell line equivalent to running ``argv`` in ``env``, showing only what differs from ``base_env``."""
    removed = sorted(k for k in base_env if k not in env)
    changed = sorted(k for k in env if base_env.get(k) != env[k])
    prefix = ["env", *(f"-u {k}" for k in removed)] if removed else []
    prefix += [f"{k}={shlex.quote(env[k])}" for k in changed]
    return " ".join([*prefix, shlex.join(argv)])


def detect_machine() -> Machine:
    """Count the CUDA GPUs this process may use (honouring an inherited CUDA_VISIBLE_DEVICES) and the CPUs."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return Machine(gpu_count=gpus, cpu_count=cpus)


def _check_files(spec: LaunchSpec) -> None:
    if not os.path.isfile(spec.script):
        raise LaunchError(f"cannot find the training script {spec.script!r} (looked from {os.getcwd()}).")
    if spec.hostfile and not os.path.isfile(spec.hostfile):
        raise LaunchError(f"cannot find the hostfile {spec.hostfile!r}; it lists one `host slots=N` per line.")


def run_command(argv: Sequence[str], env: Mapping[str, str]) -> int:
    """Run the launcher and return its exit status (128+N when killed by signal N).

    SIGTERM is forwarded to it; Ctrl-C reaches it directly (same process group), so the launcher
    itself ignores SIGINT while waiting and lets torchrun/DeepSpeed shut their workers down.
    """
    proc = subprocess.Popen(list(argv), env=dict(env))
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, lambda signum, _frame: proc.send_signal(signum)),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code if code >= 0 else 128 - code


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, build, then run (or print with --dry_run); user mistakes print a sentence and return 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if _scan(argv)[0].get("help"):
            print(USAGE)
            return 0
        spec = parse_launch_args(argv)
        machine = detect_machine()
        command, env = build_command(spec, os.environ, machine)
        if not spec.dry_run:
            _check_files(spec)
    except LaunchError as err:
        print(f"ppokit.launch: error: {err}", file=sys.stderr)
        return 2
    for note in launch_notes(spec, machine):
        print(f"ppokit.launch: note: {note}", file=sys.stderr)
    if spec.dry_run:
        print(format_command(command, env, os.environ))
        return 0
    print(f"ppokit.launch: {format_command(command, env, os.environ)}", file=sys.stderr, flush=True)
    return run_command(command, env)


if __name__ == "__main__":
    sys.exit(main())
