"""The report's top (what the run is: model, algorithm, data, shape, status, wall time) and its arguments table
(grouped, the keys that differ from the defaults first, the ones with no effect here left out)."""

from __future__ import annotations

import json
import re
from html import escape

# (group, pattern on the key); a key goes to the first group it matches, "other" when none does
ARG_GROUPS = (
    ("model", r"model_name|tokenizer|chat_template|^(bf16|fp16)$|dtype|flash_attention|lora|^critic_model|"
              r"dropout"),
    ("parallelism", r"sharding|offload|tensor_parallel|pipeline|data_parallel|world_size|local_rank|zero|"
                    r"deepspeed|recompute|sequence_parallel|^nproc|^nnodes|ddp"),
    ("logging", r"logging|report_to|run_name|^output_dir$|^save_|^save$|disable_tqdm|resume|checkpoint|"
                r"^evaluation_strategy$|^eval_steps$|^do_(eval|train|predict)$|^log_|wandb|overwrite"),
    ("data", r"datasets|prompt_key|response_key|max_prompt_len|^max_length$|task|shuffle|dataloader|^data_|"
             r"num_workers|max_evaluate_steps"),
    ("generation", r"temperature|top_p|top_k|dec_len|repetition|use_fusemt|^rollout_(?!n$)|generation|eos|"
                   r"num_beams|vllm|gpu_memory|^eval_"),
    ("optimisation", r"learning_rate|^lr|adam|weight_decay|warmup|scheduler|max_grad_norm|batch_size|"
                     r"gradient_accumulation|epochs|^max_steps$|^seed$|optim|decay|min_lr"),
    ("algorithm", r"rl_algorithm|rollout_n|kl|clip|gamma|lam|adv|reward|loss|policy|entropy|value|whiten|"
                  r"critic|overlong|dynamic_sampling|update_iters|norm|ptx|target|horizon"),
)
ORDER = ("model", "data", "algorithm", "optimisation", "generation", "parallelism", "logging", "other")


def arg_group(key: str) -> str:
    return next((group for group, pattern in ARG_GROUPS if re.search(pattern, key)), "other")


def _value(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def args_section(args: dict | None, info: dict | None) -> str:
    """The arguments by group: in each, the keys that differ from the defaults (bold), then the rest folded."""
    if args is None:
        return '<h2>Arguments</h2><p class="missing">args.json: not recorded.</p>'
    info = info or {}
    defaults, no_effect = info.get("defaults"), set(info.get("no_effect", ()))
    inactive = {k: why for k, why in info.get("inactive", {}).items() if k in args}  # none in this configuration
    given = set(info.get("given", args))  # keys the user set; the others at their value were derived or defaults
    by_group: dict[str, list[str]] = {g: [] for g in ORDER}
    for key in args:
        if key not in no_effect and key not in inactive:
            by_group[arg_group(key)].append(key)
    parts = ["<h2>Arguments</h2>"]
    if defaults is None:
        parts.append('<p class="missing">No defaults recorded (args_info.json), so every key is shown.</p>')
    for group in ORDER:
        keys = by_group[group]
        if not keys:
            continue
        changed = [k for k in keys if defaults is None or (k in given and (k not in defaults or defaults[k] != args[k]))]
        rest = [k for k in keys if k not in changed]
        rows = "".join(f"<tr><td><b>{escape(k)}</b></td><td>{escape(_value(args[k]))}</td>"
                       f"<td>{escape(_value(defaults[k])) if defaults and k in defaults else ''}</td></tr>"
                       for k in changed)
        head = "<tr><th>argument</th><th>value</th><th>default</th></tr>" if changed else ""
        folded = ""
        if rest:
            cells = "".join(f"<tr><td>{escape(k)}</td><td>{escape(_value(args[k]))}</td></tr>" for k in rest)
            folded = (f"<details><summary>{len(rest)} more at their defaults or derived</summary><table>{cells}"
                      "</table></details>")
        summary = f"{len(changed)} changed" if defaults is not None else f"{len(keys)} keys"
        parts.append(f"<h3>{group} <small>({summary})</small></h3><table>{head}{rows}</table>{folded}")
    if inactive:
        names = "; ".join(f"{k} ({why})" for k, why in inactive.items())
        parts.append(f'<p class="missing">No effect in this run: {escape(names)}.</p>')
    if no_effect & set(args):
        names = ", ".join(sorted(no_effect & set(args)))
        parts.append(f'<p class="missing">Accepted for PaddleNLP compatibility, no effect here: {escape(names)}.</p>')
    return "".join(parts)


def _algorithm(args: dict) -> str:
    from ppokit.algorithms import ALGORITHMS

    name = str(args.get("rl_algorithm") or "?")
    return ALGORITHMS[name].label if name in ALGORITHMS else name  # the algorithm table's report label


def _rewards(args: dict) -> str:
    if args.get("use_rm_server"):
        return f"rewards from the reward server {args.get('reward_server') or ''}".strip()
    if args.get("use_rule_reward"):
        return "rule rewards"
    if args.get("reward_model_name_or_path"):
        return f"reward model {args['reward_model_name_or_path']}"
    return ""


def shape(args: dict, plan: dict | None) -> str:
    """"30 steps × 8 prompts × 4 responses (32 sequences, 1 optimizer step per step)"."""
    plan = plan or {}
    steps = args.get("max_steps")
    steps_text = f"{steps} steps" if isinstance(steps, int) and steps > 0 else (
        f"{args.get('num_train_epochs')} epochs" if args.get("num_train_epochs") else "? steps")
    for key in ("total_steps", "rollout_steps"):  # a plan that knows the steps counts them itself
        if isinstance(plan.get(key), int):
            steps_text = f"{plan[key]} steps"
    prompts = plan.get("prompts_per_step", args.get("global_batch_size"))
    n = plan.get("rollout_n", args.get("rollout_n"))
    text = f"{steps_text} × {prompts} prompts × {n} responses"
    if isinstance(prompts, int) and isinstance(n, int):
        text += f" ({prompts * n} sequences per step"
        opt = plan.get("optimizer_steps_per_rollout")
        text += (f", {opt} optimizer step{'s' if opt != 1 else ''} each)" if isinstance(opt, int) else ")")
    return text


def headline(args: dict | None, plan: dict | None) -> str:
    """"GRPO on smollm2-135m-instruct · data data/arithmetic/train.jsonl (eval …) · rule rewards · 30 steps × …"."""
    if not args:
        return ""
    model = args.get("actor_model_name_or_path") or args.get("model_name_or_path") or "?"
    parts = [f"{_algorithm(args)} on {model}"]
    data = args.get("train_datasets") or args.get("train_task_config")
    if data:
        evals = args.get("eval_datasets") or args.get("eval_task_config")
        parts.append(f"data {data}" + (f" (eval {evals})" if evals and args.get("do_eval", True) else ""))
    rewards = _rewards(args)
    if rewards:
        parts.append(rewards)
    parts.append(shape(args, plan))
    return " · ".join(parts)
