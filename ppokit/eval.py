"""``python -m ppokit.eval``: evaluate a model on a task's test split or a prompt file and print a table.

    python -m ppokit.eval --model output/grpo --task arithmetic --n 8 --k 4 --temperature 1.0
    python -m ppokit.eval --model smollm2-135m-instruct --data data/arithmetic/test.jsonl --n 1

It runs the same code as ``Session.evaluate()`` (``ppokit.training.evaluate``: generation through the
rollout engine, rewards through ``build_reward_functions``, pass@k / maj@k / mean@n), on a model loaded
for inference only (no optimizer, no training data). ``--task NAME`` uses the task's test split
(generated into ``data/`` on first use, as training does); records with a ``task`` field are scored by
that task's verifier; anything else needs a reward from ``--config`` (``reward_functions``,
``use_rm_server`` ...). Greedy decoding (temperature 0) is the default for ``--n 1``, sampling at
temperature 1.0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

TASK_LAYOUT = {"knights_knaves": "ppo-kk", "kk": "ppo-kk", "ppo-kk": "ppo-kk",
               "arithmetic": "arithmetic", "countdown": "countdown"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ppokit.eval", description=(
        "Evaluate a model: N responses per prompt, then mean@N, pass@1, pass@K (unbiased), maj@N and "
        "accuracy, per task and overall."))
    p.add_argument("--model", required=True, help="a Hugging Face model folder, a .gguf file, a ppokit output_dir "
                   "or the alias smollm2-135m-instruct")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--task", help="a built-in task (arithmetic, countdown, knights_knaves): its test split")
    source.add_argument("--data", help="a prompt file (.jsonl/.json/.parquet, src/tgt or messages rows)")
    p.add_argument("--n", type=int, default=1, help="responses per prompt (default 1)")
    p.add_argument("--k", type=int, default=None, help="pass@K with K <= N (default N)")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature; 0 = greedy (default: 0 for --n 1, else 1.0)")
    p.add_argument("--max_prompts", type=int, default=None, help="evaluate only the first M prompts")
    p.add_argument("--max_dec_len", type=int, default=None, help="most new tokens per response (default 256)")
    p.add_argument("--batch_size", type=int, default=None,
                   help="prompts per generation call (default: the config's per_device_eval_batch_size, 8)")
    p.add_argument("--config", help="a ppokit/PaddleNLP argument file whose reward and generation keys apply")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: the config's seed, 42)")
    p.add_argument("--samples", type=int, default=0, help="also print this many responses")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON instead of a table")
    return p


def check_options(ns: argparse.Namespace) -> None:
    """Raise ValueError with a sentence for options that cannot work together."""
    if ns.n < 1:
        raise ValueError(f"--n must be at least 1, got {ns.n}")
    if ns.k is not None and not 1 <= ns.k <= ns.n:
        raise ValueError(f"--k {ns.k} must be between 1 and --n {ns.n}: pass@k needs at least k responses per "
                         "prompt; raise --n or lower --k")
    if ns.max_prompts is not None and ns.max_prompts < 1:
        raise ValueError(f"--max_prompts must be at least 1, got {ns.max_prompts}")
    if ns.temperature is not None and ns.temperature < 0:
        raise ValueError(f"--temperature must be 0 (greedy) or more, got {ns.temperature}")


def eval_arguments(ns: argparse.Namespace):
    """Arguments for the evaluation: the config file's (if any) with the command line's options on top."""
    from ppokit.args import load_arguments

    temperature = ns.temperature if ns.temperature is not None else (0.0 if ns.n == 1 else 1.0)
    overrides = {"actor_model_name_or_path": ns.model, "eval_rollout_n": ns.n, "eval_temperature": temperature,
                 "max_evaluate_steps": -1}
    if ns.batch_size is not None:  # else the config's (or the default), sized as training's evaluation is
        overrides["per_device_eval_batch_size"] = ns.batch_size
    if ns.max_dec_len is not None:
        overrides["max_dec_len"] = ns.max_dec_len
    elif not ns.config:
        overrides["max_dec_len"] = 256
    if ns.seed is not None:
        overrides["seed"] = ns.seed
    return load_arguments(ns.config, overrides=overrides)


def load_records(ns: argparse.Namespace, args) -> tuple[list[dict], str]:
    """(records, where they came from): a task's test split or a prompt file, cut to --max_prompts."""
    from ppokit.data import LAYOUTS, load_datasets
    from ppokit.tasks import get

    if ns.task:
        task = get(ns.task)  # unknown names raise TaskError listing the known tasks
        layout = LAYOUTS[TASK_LAYOUT[task.name]]
        path = str(Path(layout.out) / layout.test.relpath)
    else:
        path = ns.data
    records = load_datasets(path, prompt_key=args.prompt_key, response_key=args.response_key)
    if ns.max_prompts:
        records = records[: ns.max_prompts]
    if not records:
        raise ValueError(f"{path} holds no prompts")
    return records, path


def build_eval_producer(args, records: list[dict]):
    """A `Producer` for evaluation only (`ppokit.training.evaluate.evaluate`): encoded eval records, rewards, a
    rollout engine; no loader, no learner."""
    from ppokit.data import encode_prompts
    from ppokit.models import (
        attention_implementation,
        dtype_for,
        load_causal_lm,
        load_tokenizer,
        resolve_model_path,
    )
    from ppokit.rewards import build_reward_functions
    from ppokit.rollout import make_rollout_engine
    from ppokit.training.build import encode, normalize_reward_fn
    from ppokit.training.engine_setup import choose_device, seed_everything

    seed_everything(args.seed)
    device = choose_device(args, SimpleNamespace(local_rank=0))
    if device.type == "cpu":
        import torch

        from ppokit.training.waiting import govern_waiting

        govern_waiting(torch.get_num_threads())  # how idle threads wait follows the load; the count stays yours
    param_dtype, compute_dtype = dtype_for(args.bf16, args.fp16, device)
    path = resolve_model_path(args.actor_model_name_or_path)
    tokenizer = load_tokenizer(path)
    model = load_causal_lm(path, dtype=param_dtype, device=device,
                           attn_implementation=attention_implementation(args.use_flash_attention, compute_dtype))
    model.eval()
    kept = encode(records, tokenizer, args.max_prompt_len, encode_prompts)
    if not kept:
        raise ValueError(f"every prompt is longer than max_prompt_len={args.max_prompt_len} tokens; raise it")
    fns = [normalize_reward_fn(f) for f in build_reward_functions(args, kept)]
    engine = make_rollout_engine(args.rollout_engine, args.use_fusemt, model, tokenizer, model_path=path,
                                 batch_size=args.per_device_eval_batch_size, compute_dtype=compute_dtype, args=args)
    # the rollout a training run of these arguments makes (tools and turns too), scored by its rule
    from ppokit.engine import DistInfo
    from ppokit.rollout.agent_loop import agent_spec
    from ppokit.training.sides import Producer

    return Producer(args=args, dist=DistInfo(rank=0, world_size=1, local_rank=0, device=device), plan=None,
                    tokenizer=tokenizer, rollout_engine=engine, reward_fns=fns, eval_records=kept,
                    agent=agent_spec(args, tokenizer))


def format_table(metrics: dict[str, float], prompts: dict[str, int]) -> str:
    """One row per task ("all" first): prompts and each eval metric, to three decimals."""
    table: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        if not key.startswith("eval/") or key == "eval/prompts":
            continue
        task, _, name = key[len("eval/"):].rpartition("/")
        table.setdefault(task or "all", {})[name] = value
    columns = list(dict.fromkeys(name for row in table.values() for name in row))
    lines = [["task", "prompts", *columns]]
    for task, row in table.items():
        count = prompts.get(task, sum(prompts.values()) if task == "all" else 0)
        lines.append([task, str(count), *(f"{row[c]:.3f}" if c in row else "-" for c in columns)])
    widths = [max(len(line[j]) for line in lines) for j in range(len(lines[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)


def run(ns: argparse.Namespace) -> tuple[dict[str, float], list[dict], str, dict[str, int], object]:
    """Evaluate as the options say; returns (metrics, sample rows, data path, prompts per task, arguments)."""
    from ppokit.training.evaluate import evaluate

    check_options(ns)
    args = eval_arguments(ns)
    if ns.n > 1 and args.eval_temperature == 0:
        print(f"note: greedy decoding gives {ns.n} identical responses per prompt, so pass@k equals pass@1; "
              "pass --temperature 1.0 to sample", file=sys.stderr)
    records, path = load_records(ns, args)
    print(f"ppokit: loading {ns.model} and {len(records)} prompts of {path} ...", file=sys.stderr, flush=True)
    producer = build_eval_producer(args, records)
    samples: list[dict] = []
    metrics = evaluate(producer, k=ns.k or ns.n, samples=samples)
    prompts: dict[str, int] = {}
    for record in producer.eval_records:
        prompts[record.get("task") or "all"] = prompts.get(record.get("task") or "all", 0) + 1
    return metrics, samples, path, prompts, args


def main(argv: list[str] | None = None) -> int:
    from ppokit.errors import PpokitError

    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        metrics, samples, path, prompts, args = run(ns)
    except (PpokitError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ns.json:
        print(json.dumps(metrics, indent=2, sort_keys=True))
    else:
        temperature = f"temperature {args.eval_temperature:g}" if args.eval_temperature > 0 else "greedy"
        print(f"{ns.model} on {path}: {int(metrics['eval/prompts'])} prompts x {ns.n} responses, {temperature}, "
              f"{metrics['timing/eval_s']:.1f}s\n")
        print(format_table(metrics, prompts))
    for row in samples[: ns.samples]:
        expected = "" if row.get("expected") is None else f", expected {row['expected']}"
        given = "" if row.get("answer") is None else f", answered {row['answer']}"
        print(f"\n--- reward {row['reward']:g} ({'correct' if row['correct'] else 'wrong'}{expected}{given})\n"
              f"Q: {row['question']}\nA: {row['response']}")
        if row.get("judge_verdict"):  # the judge's own words, beside the answer it scored
            print(f"Judge: {row['judge_verdict']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
