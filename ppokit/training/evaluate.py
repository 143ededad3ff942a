"""Evaluation on held-out prompts: mean@n, pass@k (unbiased) and maj@k, per task and overall."""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict

from ppokit.rewards import compute_rewards


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k) for n samples of which c are correct (Chen et al. 2021)."""
    if k > n:
        raise ValueError(f"pass@k needs k <= n samples per prompt; got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_correct(answers: list, corrects: list[bool]) -> float:
    """1.0 when the most frequent extracted answer (ties: first seen) is a correct one, else 0.0."""
    usable = [(a, ok) for a, ok in zip(answers, corrects) if a is not None]
    if not usable:
        return 0.0
    top, _ = Counter(a for a, _ in usable).most_common(1)[0]
    return 1.0 if any(ok for a, ok in usable if a == top) else 0.0


def judge(record: dict, response: str, reward: float) -> tuple[bool, object]:
    """(correct, extracted answer) from the record's task verifier when it has one, else reward > 0."""
    task_name = record.get("task")
    if task_name:
        from ppokit import tasks

        try:
            score, details = tasks.get(task_name).score(response, record, details=True)
        except KeyError:
            return reward > 0, None
        correct = details.get("correct")
        if correct is None:
            correct = score >= details.get("max_score", score if score > 0 else math.inf)
        return bool(correct), details.get("answer")
    return reward > 0, None


def summarize(groups: dict, k: int) -> dict[str, float]:
    """Metrics over groups {task: [(rewards, corrects, answers) per prompt]}."""
    out: dict[str, float] = {}
    everything = [g for per_task in groups.values() for g in per_task]
    for name, items in [("", everything)] + ([(f"{t}/", v) for t, v in groups.items()] if len(groups) > 1 else []):
        if not items:
            continue
        n = len(items[0][0])
        kk = min(k, n)
        out[f"eval/{name}mean@{n}"] = sum(sum(r) / n for r, _, _ in items) / len(items)
        out[f"eval/{name}pass@{kk}"] = sum(pass_at_k(n, sum(c), kk) for _, c, _ in items) / len(items)
        if any(a is not None for _, _, ans in items for a in ans):
            out[f"eval/{name}maj@{n}"] = sum(majority_correct(a, c) for _, c, a in items) / len(items)
        out[f"eval/{name}accuracy"] = sum(sum(c) / n for _, c, _ in items) / len(items)
    return out


def evaluate(state, args, k: int | None = None) -> dict[str, float]:
    """Generate `eval_rollout_n` responses per eval prompt (greedy when eval_temperature == 0) and score them."""
    from ppokit.training.phases import generate, sampling_params

    records = state.eval_records
    if not records:
        raise ValueError("evaluate() needs eval data: set eval_datasets (or eval_task_config)")
    per_call = max(1, args.per_device_eval_batch_size)
    if args.max_evaluate_steps and args.max_evaluate_steps > 0:
        records = records[: args.max_evaluate_steps * per_call]
    n = max(1, args.eval_rollout_n)
    sampling = sampling_params(args, n=n, temperature=args.eval_temperature)
    started = time.perf_counter()
    groups: dict[str, list] = defaultdict(list)
    for start in range(0, len(records), per_call):
        chunk = records[start : start + per_call]
        batch = generate(state, chunk, sampling, group_offset=start)
        rewards, _ = compute_rewards(state.reward_fns, batch.prompt_texts, batch.response_texts, batch.records)
        for i in range(len(chunk)):
            idx = [j for j in range(len(batch)) if int(batch.group_ids[j]) == start + i]
            judged = [judge(batch.records[j], batch.response_texts[j], float(rewards[j])) for j in idx]
            groups[chunk[i].get("task") or "all"].append(
                ([float(rewards[j]) for j in idx], [c for c, _ in judged], [a for _, a in judged])
            )
    metrics = summarize(groups, k or n)
    metrics["eval/prompts"] = float(len(records))
    metrics["timing/eval_s"] = time.perf_counter() - started
    return metrics
