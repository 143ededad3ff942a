"""`make gpu-check`: one command on the GPU machine (python3 3.12, torch with CUDA, transformers; no registry) that
prints one line per item, `<item>: PASS|FAIL|SKIP (<detail>)`, and writes every figure into one JSON file.

    python3 scripts/gpu_check/run.py [--out output/gpu_check] [--only NAME ...]

`.gpu_check/` (from `prepare.py`, on a machine with registries) supplies what the image lacks; it is appended to
sys.path, so packages the machine has take precedence. A check that cannot run here (no CUDA) says SKIP, never
PASS. Exit status 1 when an item FAILed. docs/scaling.md ("GPU check") says what each line proves.
"""

from __future__ import annotations

import argparse
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
import torch  # noqa: E402

MODEL_DIR = ROOT / ".gpu_check" / "model"
SHAPES = {  # decoder shapes from the bundled config with other sizes (random weights: speed only)
    "SmolLM2-135M": {},
    "Qwen2.5-0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "Qwen2.5-1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
}


def items(work: Path) -> dict:
    model = str(MODEL_DIR)
    return {
        "bf16 inside the engine": checks.bf16_inside_the_engine,
        "KL 0 at step 0": checks.kl_zero_at_step_zero,
        "packed vs unpacked log-probs": checks.packed_vs_unpacked,
        "greedy decoding loop == generate": checks.greedy_loop_equals_generate,
        "SDPA flash and efficient kernels": checks.sdpa_kernels,
        "4 GRPO steps, hf engine": lambda: checks.grpo_hf_steps(needs_model(model), work / "grpo"),
        "ZeRO-3 2 steps and a save": lambda: checks.zero3_steps_and_save(needs_model(model), work / "zero3"),
        "decode and train tokens/s vs roofline": lambda: checks.roofline(needs_model(model), SHAPES),
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
    print(f"{name}: {status} ({detail}) [{seconds:.1f} s]", flush=True)
    return {"status": status, "detail": detail, "seconds": seconds, **figures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "output/gpu_check")
    parser.add_argument("--only", nargs="*", help="run only these items (names as printed)")
    opts = parser.parse_args()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device (CPU)"
    print(f"gpu-check on {device}; torch {torch.__version__}, python {sys.version.split()[0]}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        chosen = {k: v for k, v in items(Path(tmp)).items() if not opts.only or k in opts.only}
        results = {name: run_one(name, fn) for name, fn in chosen.items()}
    summary = {"device": device, "torch": torch.__version__, "python": sys.version.split()[0], "items": results}
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"figures: {out / 'gpu_check.json'}")
    return 1 if any(r["status"] == "FAIL" for r in results.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
