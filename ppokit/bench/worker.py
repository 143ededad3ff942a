"""One trainer's side of the bench, run in a child process: `python -m ppokit.bench.worker SPEC OUT`.

SPEC is a JSON file {"trainer": "ppokit" | "trl", "config": path or null, "overrides": {...},
"steps": N}; OUT receives {"steps": [...], "peak_rss_bytes", "flop_peaks", "threads", ...}.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import torch


def matmul_peaks(size: int = 512, repeats: int = 3) -> dict[str, float]:
    """Best FLOP/s of a (size x size) @ (size x size) matmul in bf16 and fp32 on this process's threads."""
    peaks = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        a = torch.randn(size, size, dtype=dtype)
        b = torch.randn(size, size, dtype=dtype)
        a @ b  # warm-up: thread pool and kernel selection
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - started)
        peaks[name] = 2.0 * size**3 / best
    return peaks


def governed_short_waits() -> int | None:
    """Times ppokit's wait governor switched libgomp to its short spin (None: it did not run)."""
    from ppokit.training import waiting

    return None if waiting._governor is None else waiting._governor.short_waits


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def computed_tokens(model, batch) -> int:
    """Tokens the update's forward actually runs: with rows packed by prompt, each distinct prompt once
    plus every response token; otherwise every real token of every row (what TRL runs)."""
    from ppokit.training.packing import can_pack, unique_prompts

    if not can_pack(model, batch):
        return int(batch.attention_mask.sum())
    _, prompt_mask, _ = unique_prompts(batch.input_ids, batch.attention_mask, batch.prompt_len)
    return int(prompt_mask.sum()) + int(batch.response_mask.sum())


def slowed(reward, seconds: float):
    """The reward function waiting `seconds` before each call (`--reward-latency`: a remote scorer's wait)."""
    import dataclasses
    import inspect
    import time

    def fn(*args, **kwargs):
        time.sleep(seconds)
        return reward.fn(*args, **kwargs)

    try:
        fn.__signature__ = inspect.signature(reward.fn)  # the same keyword fields reach it
    except (TypeError, ValueError):
        pass
    return dataclasses.replace(reward, fn=fn)


def run_ppokit(spec: dict) -> list[dict]:
    """Steps through the real `Session` (the one trainer), timings from its own `timing/*` metrics."""
    from ppokit.bench.summary import finish_row, param_counts, update_flop
    from ppokit.session import Session  # the bench drives the trainer exactly as a notebook does

    session = Session.from_json(spec["config"], **spec["overrides"]) if spec["config"] else Session.from_args(
        **spec["overrides"])
    body, head = param_counts(session.model)
    if spec.get("reward_latency"):
        session.producer.reward_fns = [slowed(f, spec["reward_latency"]) for f in session.producer.reward_fns]
    spec["compute_dtype"] = str(session.learner.policy.compute_dtype)
    steps = []
    for _ in range(spec["steps"]):
        m = session.step()
        batch = session.last_batch
        generated = int(batch.response_mask.sum())
        trained = int(batch.attention_mask.sum())
        computed = computed_tokens(session.model, batch)
        row = {
            "rollout_s": m["timing/rollout_s"],
            "reference_s": m.get("timing/ref_s", 0.0),
            "old_logprobs_s": m.get("timing/old_logprob_s", 0.0),
            "reward_s": m.get("timing/reward_s", 0.0),
            "update_s": m["timing/update_s"],
            "step_s": m["timing/step_s"],
            "generated_tokens": generated,
            "trained_tokens": trained,
            "computed_tokens": computed,
            "update_flop": update_flop(body, head, computed, generated),
            "reward": m["reward/mean"],
        }
        steps.append(finish_row(row))
        print(f"ppokit step {len(steps)}: {row['step_s']:.2f} s, reward {row['reward']:.2f}", file=sys.stderr, flush=True)
    session.close()
    return steps


def main(argv: list[str]) -> None:
    spec_path, out_path = argv
    spec = json.loads(open(spec_path).read())
    from ppokit.training.waiting import SAMPLE_S, govern_waiting, others_between, reading, usable_cpus

    before = reading(usable_cpus())
    torch.manual_seed(0)
    if spec["trainer"] == "ppokit":  # its threads wait as a run's do (the governor) while the peaks are measured too
        govern_waiting(torch.get_num_threads())
        time.sleep(2 * SAMPLE_S)  # the governor's first readings: a neighbour already there is seen
    peaks = matmul_peaks()
    if spec["trainer"] == "ppokit":
        steps = run_ppokit(spec)
    elif spec["trainer"] == "trl":
        from ppokit.bench.trl_side import run_trl

        steps = run_trl(spec)
    else:
        raise SystemExit(f"unknown trainer {spec['trainer']!r}; expected 'ppokit' or 'trl'")
    others = others_between(before, reading(usable_cpus()))  # cores other processes kept busy
    out = {"steps": steps, "compute_dtype": spec.get("compute_dtype"), "peak_rss_bytes": peak_rss_bytes(),
           "flop_peaks": peaks, "threads": torch.get_num_threads(), "others_cores": others,
           "wait": {**{k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")},
                    "short_waits": governed_short_waits()},
           "torch": torch.__version__}
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
