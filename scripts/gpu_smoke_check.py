"""The pass/fail rules of scripts/gpu_smoke.sh.

    python scripts/gpu_smoke_check.py OUTPUT_DIR STEPS MAX_DIFF ENGINE    # one training run
    python scripts/gpu_smoke_check.py summary OUT STEPS MAX_DIFF          # one line per issue-#30 item

One run: reads OUTPUT_DIR/metrics.jsonl; passes (exit 0) when every step logged reward/mean and
rollout/logprob_diff, the last step's reward/mean is above the first's, and no step's
rollout/logprob_diff exceeds MAX_DIFF. Prints the per-step values either way.

Summary: reads what gpu_smoke.sh left in OUT (OUT/<run>.exit and OUT/<run>/metrics.jsonl for the training runs,
OUT/probe/probe.json, OUT/two_procs/<check>.exit and .log) and prints `item N <what>: PASS|FAIL|SKIP (why)` for
each item of issue #30; exit 1 when any item FAILs. An item whose evidence was not produced is a SKIP saying so.
"""

import json
import re
import sys
from pathlib import Path


def check(run: Path, steps: int, max_diff: float, engine: str) -> list[str]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    diffs = [r["rollout/logprob_diff"] for r in rows if "rollout/logprob_diff" in r]
    maxes = [r["rollout/logprob_diff/max"] for r in rows if "rollout/logprob_diff/max" in r]
    print(f"{engine}: reward/mean per step {[round(x, 3) for x in rewards]}")
    print(f"{engine}: rollout/logprob_diff per step {[round(x, 4) for x in diffs]} "
          f"(max |diff| {[round(x, 3) for x in maxes]})")
    problems = []
    if len(rewards) != steps:
        problems.append(f"expected {steps} logged steps with reward/mean, found {len(rewards)}")
    elif not rewards[-1] > rewards[0]:
        problems.append(f"reward/mean did not rise: first step {rewards[0]:.3f}, last step {rewards[-1]:.3f} "
                        "(a noisy check over few steps: rerun with STEPS=10 before suspecting the trainer)")
    if len(diffs) != steps:
        problems.append(f"expected rollout/logprob_diff on every step, found it on {len(diffs)}")
    elif max(diffs) > max_diff:
        problems.append(f"rollout/logprob_diff reached {max(diffs):.4f} > {max_diff}: the engine's and the trainer's "
                        "log-probs disagree (wrong weights synced, wrong temperature, or precision); see docs/scaling.md")
    return problems


def run_status(out: Path, name: str, steps: int | None = None, max_diff: float | None = None) -> tuple[str, str]:
    """(status, why) of the training run `name`: its exit code, then (with steps) its metrics rules."""
    code = out / f"{name}.exit"
    if not code.is_file():
        return "SKIP", f"run {name} did not run"
    if code.read_text().strip() != "0":
        return "FAIL", f"run {name} exited {code.read_text().strip()} (see {out / (name + '.log')})"
    if steps is not None:
        problems = check(out / name, steps, max_diff, name)
        if problems:
            return "FAIL", f"run {name}: " + "; ".join(problems)
    return "PASS", f"run {name} finished"


def probe_status(out: Path, item: str) -> tuple[str, str]:
    file = out / "probe" / "probe.json"
    if not file.is_file():
        return "SKIP", "the probe did not run"
    found = json.loads(file.read_text()).get(item)
    if found is None:
        return "SKIP", f"probe {item} did not run"
    return found["status"], f"probe {item}: {found['detail'].splitlines()[0] if found['detail'] else ''}"


def two_procs_status(out: Path, name: str) -> tuple[str, str]:
    """A 2-process check under torchrun: its exit code and, for skip_group, equal batch sizes on both ranks."""
    code, log = out / "two_procs" / f"{name}.exit", out / "two_procs" / f"{name}.log"
    if not code.is_file():
        return "SKIP", f"2-process {name} did not run"
    text = log.read_text() if log.is_file() else ""
    if code.read_text().strip() != "0":
        return "FAIL", f"2-process {name} exited {code.read_text().strip()} (see {log})"
    if name == "skip_group":
        sizes = re.findall(r"^rank (\d+): (\d+) sequences", text, re.M)
        if len(sizes) != 2 or len({s for _, s in sizes}) != 1:
            return "FAIL", f"2-process skip_group: batch sizes per rank {sizes} are not two equal ones"
        return "PASS", f"both ranks kept {sizes[0][1]} sequences"
    if name == "local_rank":
        verdicts = re.findall(r"^local_rank \d+: (\w+)", text, re.M)
        if verdicts != ["PASS", "PASS"]:
            return "FAIL", f"2-process local_rank: {verdicts or 'no verdicts'} ({log})"
    return "PASS", f"2-process {name} passed"


def combine(*parts: tuple[str, str]) -> tuple[str, str]:
    """FAIL if any part failed, PASS if some passed and none failed, else SKIP; the reasons joined."""
    statuses = {s for s, _ in parts}
    status = "FAIL" if "FAIL" in statuses else "PASS" if "PASS" in statuses else "SKIP"
    return status, "; ".join(why for _, why in parts)


def items(out: Path, steps: int, max_diff: float) -> list[tuple[str, str, tuple[str, str]]]:
    """(number, what, (status, why)) for each item of issue #30."""
    tp = run_status(out, "vllm_tp2")
    if tp[0] == "SKIP":
        tp = ("SKIP", "needs 2 GPUs (tensor_parallel_degree 2 with dropout); run with 2 visible GPUs")
    return [
        ("1", "device: actor, reference, old log-probs, packing on the GPU",
         combine(run_status(out, "hf"), probe_status(out, "device"))),
        ("1", "device: critic values and update", run_status(out, "ppo")),
        ("2", "vLLM wakes up after an update (cache emptied first)", run_status(out, "vllm")),
        ("3", "engine order: vLLM starts beside the actor, optimizer and reference", run_status(out, "vllm")),
        ("4", "TP group members sample the same tokens", tp),
        ("5", "flash-attention-2 only with bf16/fp16, the reference's attention = the actor's",
         combine(probe_status(out, "attention"), run_status(out, "ppo"))),
        ("6", "decoding loop's KV cache in the compute dtype", run_status(out, "hf")),
        ("7", "ZeRO-3: partitioned load, module-by-module save",
         combine(run_status(out, "zero3"), probe_status(out, "zero3"))),
        ("8", "LOCAL_RANK from LOCAL_RANK or LOCAL_WORLD_SIZE, never RANK", two_procs_status(out, "local_rank")),
        ("9", "skip_group keeps ranks' batch sizes equal", two_procs_status(out, "skip_group")),
        ("-", "learning, hf engine: reward rises, engine and trainer log-probs agree",
         run_status(out, "hf", steps, max_diff)),
        ("-", "learning, vLLM engine: reward rises, engine and trainer log-probs agree",
         run_status(out, "vllm", steps, max_diff)),
    ]


def summary(out: Path, steps: int, max_diff: float) -> int:
    failed = False
    for number, what, (status, why) in items(out, steps, max_diff):
        print(f"item {number} {what}: {status} ({why})")
        failed |= status == "FAIL"
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if argv[0] == "summary":
        return summary(Path(argv[1]), int(argv[2]), float(argv[3]))
    run, steps, max_diff, engine = Path(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    problems = check(run, steps, max_diff, engine)
    for p in problems:
        print(f"{engine}: FAIL: {p}")
    print(f"{engine}: {'FAIL' if problems else 'PASS'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
