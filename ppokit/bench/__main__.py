"""`python -m ppokit.bench [CONFIG] [--steps N] [--warmup K] [--compare trl|vllm] [--neighbours N] [--out FILE.json]
[--set key=value]`.

`--neighbours N` runs each trainer twice, idle and then beside N CPU-bound processes started for that run only.

`--compare vllm` times rollouts only: ppokit's decoding loop and vLLM on the same prompts (`--steps` batches).

Without CONFIG the issue-14 work: config/grpo_argument.json (SmolLM2-135M-Instruct, single-digit
addition through the chat template, 4 prompts x 8 samples, 32 new tokens, temperature 1, beta 0,
bf16, one optimizer step per rollout) with learning_rate 1e-5.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from ppokit.bench.neighbours import busy_neighbours
from ppokit.bench.summary import async_bound_line, format_table, summarize

DEFAULT_CONFIG = "config/grpo_argument.json"
DEFAULT_OVERRIDES = {"learning_rate": 1e-5}
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m ppokit.bench", description=__doc__.splitlines()[0])
    p.add_argument("config", nargs="?", default=None, help=f"argument file (default {DEFAULT_CONFIG} + lr 1e-5)")
    p.add_argument("--steps", type=int, default=8, help="steps to run per trainer (default 8)")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of median/max (default 2)")
    p.add_argument("--compare", choices=["trl", "vllm"], default=None,
                   help="trl: also run TRL's GRPOTrainer on the same work; vllm: rollouts of ppokit's decoding "
                        "loop vs vLLM (tokens/s)")
    p.add_argument("--out", default="output/bench/results.json", help="JSON results file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--only", choices=["ppokit", "trl"], default=None, help="run one trainer only")
    p.add_argument("--async", dest="async_k", type=int, default=None, metavar="K",
                   help="asynchronous rollouts: staleness_threshold=K with a producer thread (docs/async.md)")
    p.add_argument("--reward-latency", type=float, default=0.0, metavar="S",
                   help="each reward call waits S seconds first (a remote reward, a sandbox): what async can hide")
    p.add_argument("--neighbours", type=int, default=0, metavar="N",
                   help="run each trainer idle and again beside N CPU-bound processes (a shared machine), side by side")
    return p.parse_args(argv)


def overrides_from(ns, workdir: str) -> dict:
    out = dict(DEFAULT_OVERRIDES) if ns.config is None else {}
    for item in ns.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    out.update(max_steps=ns.steps, output_dir=os.path.join(workdir, "run"), logging_dir=os.path.join(workdir, "vdl"),
               save_strategy="no", disable_tqdm=True)
    return out


def runs_of(ns) -> list[tuple[str, str, dict]]:
    """(label, worker trainer, extra overrides) of each run. `--async K` runs ppokit twice on the same work,
    synchronous (k = 0) then asynchronous (staleness_threshold K, producer thread): the peer of an async run is
    the synchronous one."""
    if ns.async_k:
        async_keys = {"staleness_threshold": ns.async_k, "async_producer": "thread", "rollout_is": "token"}
        runs = [("ppokit", "ppokit", {}), (f"ppokit async k={ns.async_k}", "ppokit", async_keys)]
        return runs[1:] if ns.only == "ppokit" else runs
    names = [ns.only] if ns.only else ["ppokit"] + ([ns.compare] if ns.compare else [])
    return [(name, name, {}) for name in names]


def run_worker(trainer: str, spec: dict, workdir: str, label: str | None = None) -> dict:
    tag = (label or trainer).replace(" ", "-").replace("=", "")
    spec_path, out_path = Path(workdir, f"{tag}-spec.json"), Path(workdir, f"{tag}-out.json")
    spec_path.write_text(json.dumps({**spec, "trainer": trainer}))
    # A single-process run each: the child must not join a process group this process may have set up.
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    done = subprocess.run([sys.executable, "-m", "ppokit.bench.worker", str(spec_path), str(out_path)], env=env)
    if done.returncode != 0:
        raise SystemExit(f"the {trainer} run failed (exit {done.returncode}); its output is above")
    return json.loads(out_path.read_text())


def compare_vllm(ns) -> dict:
    from ppokit.bench.rollout_compare import compare_rollout, format_rollout_table

    with tempfile.TemporaryDirectory(prefix="ppokit-bench-") as workdir:
        results = compare_rollout({"config": ns.config or DEFAULT_CONFIG, "overrides": overrides_from(ns, workdir)},
                                  ns.steps)
    table = format_rollout_table(results)
    print(table)
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()},
              "results": results, "table": table}
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.out).write_text(json.dumps(report, indent=1, default=str))
    print(f"results: {ns.out}")
    return report


def main(argv=None) -> dict:
    ns = parse(sys.argv[1:] if argv is None else argv)
    if ns.compare == "vllm":
        return compare_vllm(ns)
    if ns.async_k and ns.compare:
        raise SystemExit("--async K compares ppokit's asynchronous run with its synchronous one; leave out --compare")
    with tempfile.TemporaryDirectory(prefix="ppokit-bench-") as workdir:
        config = ns.config or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).exists() else None)
        if config is None:
            raise SystemExit(f"no CONFIG given and {DEFAULT_CONFIG} is not here; run from the repository root")
        spec = {"config": config, "overrides": overrides_from(ns, workdir), "steps": ns.steps,
                "reward_latency": ns.reward_latency}
        results, neighbour_pids = {}, []
        for label, trainer, extra, neighbours in with_neighbours(runs_of(ns), ns.neighbours):
            folder = os.path.join(workdir, label.replace(" ", "-").replace("=", ""))  # a run's own output_dir
            extra = {**extra, "output_dir": os.path.join(folder, "run"), "logging_dir": os.path.join(folder, "vdl")}
            with busy_neighbours(neighbours) as pids:
                raw = run_worker(trainer, {**spec, "overrides": {**spec["overrides"], **extra}}, workdir, label)
            neighbour_pids += pids
            raw["summary"] = summarize(raw["steps"], ns.warmup, raw["flop_peaks"])
            raw["neighbours"] = neighbours
            results[label] = raw
    table = format_table(results)
    if ns.neighbours:
        table += "\n" + loaded_lines(results)
    if ns.async_k and len(results) == 2:
        table += "\n" + async_bound_line(*(r["summary"] for r in results.values()))
    print(table)
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpus": os.cpu_count()},
              "config": config, "overrides": spec["overrides"], "steps": ns.steps, "warmup": ns.warmup,
              "results": results, "table": table, "neighbour_pids": neighbour_pids}
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.out).write_text(json.dumps(report, indent=1, default=str))
    print(f"results: {ns.out}")
    return report


def with_neighbours(runs: list[tuple[str, str, dict]], count: int) -> list[tuple[str, str, dict, int]]:
    """Each run idle (0 neighbours) and, with `count` > 0, right after it the same run beside `count` busy ones."""
    out = []
    for label, trainer, extra in runs:
        out.append((label, trainer, extra, 0))
        if count:
            out.append((f"{label} beside {count} busy", trainer, extra, count))
    return out


def loaded_lines(results: dict[str, dict]) -> str:
    """Per trainer: its step beside the neighbours against its idle step (medians) and the load other processes
    put on the machine during each run; with two trainers, their step ratio idle and loaded."""
    lines, ratios = [], {}
    for label, loaded in results.items():
        idle = results.get(label.rsplit(" beside ", 1)[0]) if " beside " in label else None
        if idle is None or "step" not in idle["summary"] or "step" not in loaded["summary"]:
            continue
        idle_s, loaded_s = idle["summary"]["step"]["median_s"], loaded["summary"]["step"]["median_s"]
        ratios[label] = (idle_s, loaded_s)
        lines.append(f"{label}: step {loaded_s / idle_s:.2f}x its idle step; other processes kept "
                     f"{_cores(loaded.get('others_cores'))} cores busy during it, {_cores(idle.get('others_cores'))} "
                     f"during the idle run; threads waited {_wait(loaded)} beside them, {_wait(idle)} idle")
    if len(ratios) == 2:
        (first, (idle_a, loaded_a)), (second, (idle_b, loaded_b)) = ratios.items()
        lines.append(f"{second.split(' beside ')[0]} / {first.split(' beside ')[0]} step: {idle_b / idle_a:.2f}x idle, "
                     f"{loaded_b / loaded_a:.2f}x beside the neighbours")
    return "\n".join(lines)


def _wait(result: dict) -> str:
    """How a worker's idle threads waited: the user's variables, ppokit's governor (how often it took the short
    spin), or libgomp's own spin."""
    wait = result.get("wait") or {}
    chosen = {k: v for k, v in wait.items() if v and k != "short_waits"}
    if chosen:
        return " ".join(f"{k}={v}" for k, v in chosen.items())
    if wait.get("short_waits") is not None:
        return f"governed by ppokit (short spin taken {wait['short_waits']} times)"
    return "as libgomp's default"


def _cores(value) -> str:
    return "?" if value is None else f"{value:.1f}"


if __name__ == "__main__":
    main()
