"""Evaluation on held-out prompts: mean@n, pass@k (unbiased) and maj@k, per task and overall."""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from dataclasses import replace

from ppokit.args import ConfigError


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


def comparable_answer(details: dict):
    """The extracted answer of a task verifier's details, as a hashable value (None when there is none)."""
    answer = details.get("answer", details.get("predicted"))
    if isinstance(answer, (dict, list)):
        return json.dumps(answer, sort_keys=True)
    return answer


def eval_sample(batch, j: int, reward: float, correct: bool, answer) -> dict:
    """One eval response as a person reads it: the question, the expected and the given answer, the verdict."""
    from ppokit.data.render import question_text

    record = batch.records[j]
    expected = next((record[k] for k in ("label", "answer", "tgt", "response") if record.get(k) is not None), None)
    return {"question": question_text(record, batch.prompt_texts[j]), "expected": expected, "answer": answer,
            "response": batch.response_texts[j], "reward": reward, "correct": correct,
            "prompt": batch.prompt_texts[j]}


def judge(record: dict, response: str, reward: float) -> tuple[bool, object]:
    """(correct, extracted answer) from the record's task verifier when it has one, else reward > 0.

    A verifier's `correct` detail decides; without one, a response is correct when it earns the task's
    maximum score (partial credit, e.g. countdown's format credit, is not correct).
    """
    task_name = record.get("task")
    if task_name:
        from ppokit import tasks

        try:
            task = tasks.get(task_name)
        except (KeyError, tasks.TaskError):
            return reward > 0, None
        score, details = task.score(response, record, details=True)
        correct = details.get("correct")
        if correct is None:
            correct = score >= task.max_score
        return bool(correct), comparable_answer(details)
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
        for kp in sorted({1, kk}):
            out[f"eval/{name}pass@{kp}"] = sum(pass_at_k(n, sum(c), kp) for _, c, _ in items) / len(items)
        if any(a is not None for _, _, ans in items for a in ans):
            out[f"eval/{name}maj@{n}"] = sum(majority_correct(a, c) for _, c, a in items) / len(items)
        out[f"eval/{name}accuracy"] = sum(sum(c) / n for _, c, _ in items) / len(items)
    return out


def eval_records(producer, args) -> list[dict]:
    """The eval prompts this evaluation uses: all of them, or `max_evaluate_steps` batches of them."""
    records = producer.eval_records
    if not records:
        raise ConfigError("evaluate() needs eval data: set eval_datasets (or eval_task_config)")
    per_call = max(1, args.per_device_eval_batch_size)
    if args.max_evaluate_steps and args.max_evaluate_steps > 0:
        records = records[: args.max_evaluate_steps * per_call]
    return records


def eval_chunks(n_records: int, per_call: int, rank: int, world: int, balanced: bool) -> list[tuple[int, bool]]:
    """(start, keep) of the generation calls this rank makes: chunk c of the eval set goes to rank c % world, so
    every chunk is generated exactly as one rank would (same prompts, same per-call seed). `balanced` (a
    tensor-parallel rollout, whose generate is a collective of its group): every rank makes as many calls, a rank
    short of chunks repeating one whose results it drops (keep False)."""
    starts = list(range(0, n_records, per_call))
    mine = [(s, True) for s in starts[rank::world]]
    if balanced:
        rounds = -(-len(starts) // world)
        mine += [(starts[0], False)] * (rounds - len(mine))
    return mine


def judge_batch(producer, batch, start: int, chunk: list[dict], samples: list | None):
    """([(task, (rewards, corrects, answers)) per prompt of the chunk], what the reward sources reported): the
    rows scored by training's rule (`phases.rewards_of`: final answers, the conversation, the tools' step rewards),
    then judged. A prompt with an unscored row (a reward source under reward_on_error: skip_group gave none) is
    left out of the metrics and counted in `eval/skipped_groups`; its rows still go to `samples`, reward NaN."""
    from ppokit.rewards.reports import take_reports
    from ppokit.training.phases import rewards_of

    rewards, per_fn = rewards_of(producer, batch)
    reported, notes = take_reports(producer.reward_fns, len(batch))  # e.g. the judge's counts, cost and verdicts
    reported = dict(reported)
    out = []
    for i in range(len(chunk)):
        idx = [j for j in range(len(batch)) if int(batch.group_ids[j]) == start + i]
        judged = [judge(batch.records[j], batch.response_texts[j], float(rewards[j])) for j in idx]
        if any(math.isnan(float(rewards[j])) for j in idx):
            reported["skipped_groups"] = reported.get("skipped_groups", 0.0) + 1.0
        else:
            out.append((chunk[i].get("task") or "all",
                        ([float(rewards[j]) for j in idx], [c for c, _ in judged], [a for _, a in judged])))
        if samples is not None:
            for j, (c, a) in zip(idx, judged):
                row = eval_sample(batch, j, float(rewards[j]), c, a)
                if len(per_fn) > 1 or notes[j]:  # each source's own score beside the verdict it gave
                    row.update({f"reward/{k}": float(v[j]) for k, v in per_fn.items()})
                samples.append({**row, **notes[j]})
    return out, reported


def eval_metric_names(reported: dict[str, float]) -> dict[str, float]:
    """What reward sources reported over an evaluation, renamed for it: reward/X -> eval/X, timing/X ->
    timing/eval_X, judge/X -> eval/judge_X (so reward/judge_unparsed, timing/judge_s, judge/tokens of the training
    steps are eval/judge_unparsed, timing/eval_judge_s, eval/judge_tokens here, never mixed with them)."""
    out: dict[str, float] = {}
    for key, value in reported.items():
        head, _, tail = key.partition("/")
        if not tail:
            name = f"eval/{head}"
        elif head == "timing":
            name = f"timing/eval_{tail}"
        elif head == "reward":
            name = f"eval/{tail}"
        else:
            name = f"eval/{head}_{tail.replace('/', '_')}"
        out[name] = out.get(name, 0.0) + value
    return out


def generate_and_judge(producer, args, records: list[dict], samples: list | None = None):
    """({task: [(rewards, corrects, answers) per prompt]}, what the reward sources reported, summed over the
    generation calls) for `eval_rollout_n` responses per record.

    Sampling is seeded from `seed` per generation call (`SamplingParams.seed`), so an evaluation is
    repeatable and leaves the training rollouts exactly as they would be without it. `samples`, when
    given, collects (prompt, response, reward, correct) rows. With several data-parallel ranks each generates
    its share of the calls (`eval_chunks`) and the results are gathered in the eval set's order, so the metrics
    equal one rank's (a collective: every rank calls it).
    """
    from ppokit.engine import world_size
    from ppokit.tracking.progress import PhaseBar
    from ppokit.training.phases import generate, sampling_params

    per_call = max(1, args.per_device_eval_batch_size)
    n = max(1, args.eval_rollout_n)
    sampling = sampling_params(args, n=n, temperature=args.eval_temperature)
    world = world_size()
    done = []  # (start, [(task, group)], samples)
    chunks = eval_chunks(len(records), per_call, producer.dist.rank, world, balanced=args.tensor_parallel_degree > 1)
    bar = PhaseBar(sum(min(per_call, len(records) - s) for s, _ in chunks), "evaluating", "prompt",
                   disable=producer.dist.rank != 0 or bool(getattr(args, "disable_tqdm", False)))
    for start, keep in chunks:
        chunk = records[start : start + per_call]
        # a per-call seed: the engine samples from its own stream, the training RNG is left alone
        batch = generate(producer, chunk, replace(sampling, seed=args.seed + start), group_offset=start)
        rows = [] if samples is not None else None
        judged, reported = judge_batch(producer, batch, start, chunk, rows)
        if keep:
            done.append((start, judged, rows, reported))
        bar.update(len(chunk))
    bar.close()
    if world > 1:
        import torch.distributed as dist

        gathered: list = [None] * world
        dist.all_gather_object(gathered, done)
        done = sorted((d for part in gathered for d in part), key=lambda d: d[0])
    groups: dict[str, list] = defaultdict(list)
    reported: dict[str, float] = {}
    for _, judged, rows, part in done:
        for task, group in judged:
            groups[task].append(group)
        if samples is not None:
            samples.extend(rows)
        for key, value in part.items():
            reported[key] = reported.get(key, 0.0) + value
    return groups, reported


def evaluate(producer, k: int | None = None, samples: list | None = None) -> dict[str, float]:
    """Generate `eval_rollout_n` responses per eval prompt (greedy when eval_temperature == 0) and score them.

    Returns eval/mean@n, eval/pass@1, eval/pass@k (k = `k` or n), eval/maj@n where the task verifier
    extracts answers, and eval/accuracy, overall and (with several tasks) per task as eval/<task>/...
    What reward sources report is logged under eval names (`eval_metric_names`): an LLM judge's
    eval/judge_unparsed, eval/judge_errors, eval/judge_tokens, eval/judge_calls and timing/eval_judge_s, and
    eval/skipped_groups for prompts left unscored under reward_on_error: skip_group. `samples` rows carry each
    source's score (`reward/<name>`) and the judge's reasoning (`judge_verdict`).
    """
    args = producer.args
    started = time.perf_counter()
    records = eval_records(producer, args)
    if producer.dist.rank == 0:
        from ppokit.tracking.console import say

        n = max(1, args.eval_rollout_n)
        each = "1 answer each" if n == 1 else f"{n} answers"
        say(f"evaluating: {len(records)} prompts x {each} "
            f"({'greedy' if args.eval_temperature == 0 else f'temperature {args.eval_temperature:g}'})")
    groups, reported = generate_and_judge(producer, args, records, samples)
    metrics = summarize(groups, k or max(1, args.eval_rollout_n))
    metrics.update(eval_metric_names(reported))
    metrics["eval/prompts"] = float(len(records))
    metrics["timing/eval_s"] = time.perf_counter() - started
    return metrics


def reload_eval_data(producer) -> None:
    """eval_datasets / eval_task_config changed since the producer's eval set was built: load and encode them now
    (prompts of the training set are left out, as at the start)."""
    args = producer.args
    spec = (args.eval_datasets, args.eval_task_config)
    if producer.eval_spec is None or spec == producer.eval_spec:  # None: an evaluation-only producer
        return
    from ppokit.training.build import build_data_split

    records, _, _ = build_data_split(args, producer.tokenizer, *spec)
    train = {r["_prompt_text"] for r in producer.train_records}
    producer.eval_records = [r for r in records if r["_prompt_text"] not in train]
    producer.eval_spec = spec
