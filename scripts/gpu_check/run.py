"""`make gpu-check`: one command on the GPU machine (python3 3.12, torch with CUDA, transformers; no registry) that
prints one line per item, `<item>: PASS|FAIL|SKIP|TRIAL (<detail>)`, and writes every figure into one JSON file,
rewritten after each item.

    python3 scripts/gpu_check/run.py [--out output/gpu_check] [--only NAME ...] [--budget SECONDS]

`.gpu_check/` (from `prepare.py`, on a machine with registries) supplies what the image lacks; it is appended to
sys.path, so packages the machine has take precedence. A check that cannot run here (no CUDA) says SKIP, never
PASS. Exit status 1 when an item FAILed. docs/scaling.md ("GPU check") says what each line proves.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))
sys.path.append(str(ROOT / ".gpu_check" / "site"))

import checks  # noqa: E402
import perf  # noqa: E402
import torch  # noqa: E402

MODEL_DIR = ROOT / ".gpu_check" / "model"


def items(work: Path) -> dict:
    """The items in the order they run: the fast correctness items first, the speed figures last (a run cut short
    by its time limit keeps the most)."""
    model = str(MODEL_DIR)
    return {
        "bf16 inside the engine": checks.bf16_inside_the_engine,
        "KL 0 at step 0": checks.kl_zero_at_step_zero,
        "packed vs unpacked log-probs": checks.packed_vs_unpacked,
        "greedy decoding loop == generate": checks.greedy_loop_equals_generate,
        "CPU-built batch on a CUDA model": checks.cpu_batch_on_cuda_model,
        "attention implementation choice": checks.attention_choice,
        "2 processes: LOCAL_RANK and skip_group": lambda: checks.two_processes(ROOT),
        "4 GRPO steps, hf engine, ZeRO-0 bf16": lambda: checks.grpo_steps(needs_model(model), work / "grpo"),
        "2 GRPO steps, ZeRO-2 bf16": lambda: checks.grpo_steps(needs_model(model), work / "zero2", steps=2,
                                                               sharding="stage2"),
        "2 GRPO steps, ZeRO-2 fp16": lambda: checks.grpo_steps(needs_model(model), work / "fp16", steps=2,
                                                               sharding="stage2", bf16=False, fp16=True),
        "ZeRO-3 2 steps and a save": lambda: checks.grpo_steps(needs_model(model), work / "zero3", steps=2,
                                                               save=True, sharding="stage3"),
        "PPO 2 steps (critic)": lambda: checks.ppo_steps(needs_model(model), work / "ppo"),
        "vLLM engine 2 steps": lambda: checks.vllm_steps(needs_model(model), work / "vllm"),
        "attention kernels of training and decoding": perf.attention_kernels,
        "roofline: datasheet vs measured": perf.roofline,
        "Qwen2.5 train and decode tokens/s": perf.tokens_per_s,
        "4 GRPO steps, Qwen2.5-0.5B shape, ZeRO-2, 256 + 512 tokens":
            lambda: perf.qwen_grpo_realistic(needs_model(model), work / "qwen"),
    }


def needs_model(path: str) -> str:
    if not Path(path, "config.json").is_file():
        raise checks.Skip(f"{path} is missing: run scripts/gpu_check/prepare.py first")
    return path


def run_one(name: str, fn) -> dict:
    started = time.perf_counter()
    try:
        detail, figures = fn()
        status = "TRIAL" if checks.cpu_trial() else "PASS"  # a CPU trial of a GPU item proves nothing about the GPU
    except checks.Skip as why:
        status, detail, figures = "SKIP", str(why), {}
    except Exception as exc:  # noqa: BLE001 - any failure of a check is its FAIL line
        status, detail, figures = "FAIL", f"{type(exc).__name__}: {exc}".splitlines()[0][:300], {}
        figures["traceback"] = traceback.format_exc()[-3000:]
    seconds = time.perf_counter() - started
    gc.collect()  # the item's models and engines go before the next item's
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print(f"{name}: {status} ({detail}) [{seconds:.1f} s]", flush=True)
    return {"status": status, "detail": detail, "seconds": seconds, **figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "output/gpu_check")
    parser.add_argument("--only", nargs="*", help="run only these items (names as printed)")
    parser.add_argument("--budget", type=float, default=480,
                        help="seconds after which no further item starts (each says SKIP): the run ends, its JSON "
                             "complete, inside a 10-minute command limit (default 480)")
    opts = parser.parse_args()
    began = time.perf_counter()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device (CPU)"
    print(f"gpu-check on {device}; torch {torch.__version__}, python {sys.version.split()[0]}", flush=True)
    site = ROOT / ".gpu_check" / "site"
    if (site / "deepspeed").is_dir() and not any(site.glob("deepspeed-*.dist-info")):
        print(f"note: {site} was prepared before DeepSpeed got its dist-info (ZeRO-3 will fail with "
              "PackageNotFoundError); rerun `make gpu-check-prepare` where a registry is reachable", flush=True)
    summary = {"device": device, "torch": torch.__version__, "python": sys.version.split()[0], "items": {}}
    with tempfile.TemporaryDirectory() as tmp:
        every = items(Path(tmp))
        unknown = sorted(set(opts.only or []) - set(every))
        if unknown:
            parser.error(f"--only {unknown}: no such item; the items are {list(every)}")
        chosen = {k: v for k, v in every.items() if not opts.only or k in opts.only}
        for name, fn in chosen.items():
            if time.perf_counter() - began > opts.budget:
                fn = out_of_time(opts.budget)
            summary["items"][name] = run_one(name, fn)
            write_json(out / "gpu_check.json", summary)  # item by item: a hang or a time limit keeps the rest
    print(f"figures: {out / 'gpu_check.json'}")
    return 1 if any(r["status"] == "FAIL" for r in summary["items"].values()) else 0


def out_of_time(budget: float):
    def skip():
        raise checks.Skip(f"not started: the run passed its --budget of {budget:.0f} s")

    return skip


def write_json(path: Path, summary: dict) -> None:
    """`summary` to `path` through a temporary file and a rename, so a kill mid-write leaves the previous version."""
    part = path.with_suffix(".part")
    part.write_text(json.dumps(summary, indent=1, default=str))
    part.replace(path)


if __name__ == "__main__":
    raise SystemExit(main())
