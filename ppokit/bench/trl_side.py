"""TRL's `GRPOTrainer` on exactly the work ppokit's Session would do: the same prompts in the same order
(drawn from ppokit's seeded loader), model, reward functions, sizes and precision.

Phases are timed by wrapping the trainer's own methods: `_generate` (rollout), `_calculate_rewards`
(reward), the rest of `_generate_and_score_completions` (log-probs, advantages: reported as
old_logprobs), and the remainder of each optimizer step (update).
"""

from __future__ import annotations

import functools
import sys
import tempfile
import time

import torch

from ppokit.bench.summary import update_flop


def ppokit_side_inputs(spec: dict):
    """(args, model path, tokenizer, ordered records for `steps` steps, reward functions) as ppokit builds them."""
    from ppokit.args import batch_plan, load_arguments
    from ppokit.models import load_tokenizer, resolve_model_path
    from ppokit.rewards import build_reward_functions
    from ppokit.training.build import build_data, normalize_reward_fn

    args = load_arguments(spec["config"], overrides=spec["overrides"])
    path = resolve_model_path(args.actor_model_name_or_path)
    tokenizer = load_tokenizer(path)
    plan = batch_plan(args, 1)
    train, _, loader = build_data(args, tokenizer, plan)
    records = [r for _ in range(spec["steps"]) for r in loader.next_batch()]
    fns = [normalize_reward_fn(f) for f in build_reward_functions(args, train)]
    return args, path, tokenizer, plan, records, fns


def trl_config(args, plan, steps: int, output_dir: str):
    """GRPOConfig for the same sizes; bf16 only where ppokit computes in bf16 too (see `dtype_for`)."""
    from trl import GRPOConfig

    from ppokit.models import dtype_for

    bf16 = dtype_for(args.bf16, args.fp16, "cpu")[1] == torch.bfloat16

    per_step = plan.prompts_per_step * args.rollout_n
    micro = min(plan.micro_batch_size, per_step)
    return GRPOConfig(
        output_dir=output_dir, use_cpu=True, bf16=bf16, max_steps=steps, seed=args.seed,
        per_device_train_batch_size=micro, gradient_accumulation_steps=per_step // micro,
        num_generations=args.rollout_n, max_completion_length=args.max_dec_len,
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or None,
        learning_rate=args.learning_rate, lr_scheduler_type=args.lr_scheduler_type, weight_decay=args.weight_decay,
        adam_beta1=args.adam_beta1, adam_beta2=args.adam_beta2, adam_epsilon=args.adam_epsilon,
        max_grad_norm=args.max_grad_norm, beta=args.kl_loss_coeff, num_iterations=args.update_iters,
        epsilon=args.clip_range_ratio, shuffle_dataset=False, logging_steps=1, report_to="none",
        save_strategy="no", disable_tqdm=True, dataloader_num_workers=0, log_completions=False,
    )


def timed(store: dict, key: str, fn):
    """Wrap `fn` so each call adds its wall time to store[key]."""
    @functools.wraps(fn)
    def wrapper(*a, **k):
        started = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            store[key] = store.get(key, 0.0) + time.perf_counter() - started
    return wrapper


def run_trl(spec: dict) -> list[dict]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOTrainer

    from ppokit.bench.summary import finish_row, param_counts
    from ppokit.rewards.functions import compute_rewards

    args, path, tokenizer, plan, records, fns = ppokit_side_inputs(spec)

    def reward(prompts, completions, record_index, **_):
        rows = [records[i] for i in record_index]
        total, _ = compute_rewards(fns, prompts, completions, rows)
        return total.tolist()

    reward.__name__ = "ppokit_rewards"
    data = Dataset.from_list([{"prompt": r["_prompt_text"], "record_index": i} for i, r in enumerate(records)])
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    body, head = param_counts(model)
    phase: dict = {}
    steps: list[dict] = []
    clock = {"last": None}

    class Recorder(TrainerCallback):  # TRL's callback protocol is a base class
        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "reward" in logs and steps:
                steps[-1]["reward"] = float(logs["reward"])
                generated = float(logs.get("completions/mean_length", 0.0)) * plan.prompts_per_step * args.rollout_n
                steps[-1]["generated_tokens"] = generated
                total = float(logs.get("num_tokens", 0.0))
                steps[-1]["trained_tokens"] = total - clock.get("tokens", 0.0)
                clock["tokens"] = total
                steps[-1]["update_flop"] = update_flop(body, head, steps[-1]["trained_tokens"], generated)

        def on_step_end(self, _args, state, control, **kw):
            now = time.perf_counter()
            step_s = now - clock["last"]
            clock["last"] = now
            prepare = phase.pop("prepare", 0.0)
            rollout, rew = phase.pop("rollout", 0.0), phase.pop("reward", 0.0)
            steps.append(finish_row({
                "rollout_s": rollout, "reference_s": 0.0, "old_logprobs_s": max(prepare - rollout - rew, 0.0),
                "reward_s": rew, "update_s": max(step_s - prepare, 0.0), "step_s": step_s,
                "generated_tokens": 0, "trained_tokens": 0, "update_flop": 0.0, "reward": float("nan"),
            }))
            print(f"trl step {len(steps)}: {step_s:.2f} s", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as out:
        config = trl_config(args, plan, spec["steps"], out)
        spec["compute_dtype"] = str(torch.bfloat16 if config.bf16 else torch.float32)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=config,
                              train_dataset=data, processing_class=tokenizer, callbacks=[Recorder()])
        trainer._generate = timed(phase, "rollout", trainer._generate)
        trainer._calculate_rewards = timed(phase, "reward", trainer._calculate_rewards)
        trainer._generate_and_score_completions = timed(phase, "prepare", trainer._generate_and_score_completions)
        clock["last"] = time.perf_counter()
        trainer.train()
    return steps
