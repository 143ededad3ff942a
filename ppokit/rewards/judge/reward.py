"""An LLM judge as a reward source: `JudgeReward(client, template)` is a RewardFn.

Per answer it asks the judge (see `clients`) with a template (see `templates`) and parses the verdict:
    score     one call; "Score: N" on 1..10 -> (N - 1) / 9 in [0, 1] (score_10); yes/no -> 1/0 (yes_no), or with
              judge_parser p_yes the judge's P(yes) / (P(yes) + P(no)) on its first token (small judges)
    pairwise  two calls, the answer as A against the reference as B, then the other way round, so that a judge that
              prefers a position gains nothing: reward = (wins + ties / 2) / 2 in {0, 0.25, 0.5, 0.75, 1}
    rubric    one call per rubric item (`judge_rubric`, or a record's `rubric` field); reward = share of "yes"
All the calls of a batch go to the client at once (it batches or runs them concurrently).

Nothing is a quiet zero: a verdict that does not parse, or a call that timed out or failed, makes that answer
unscored. It is counted (`reward/judge_unparsed`, `reward/judge_errors`) and, as reward_on_error says, stops the
run with a RewardError that quotes the verdict (raise) or gives None, which drops the answer's group and counts it
in reward/skipped_groups (skip_group). Each call's cost is kept for the step's log (`timing/judge_s`,
`judge/tokens`, `judge/calls`), and each answer's verdicts for samples.jsonl (`judge_verdict`), through
`take_report()` (see `ppokit.rewards.reports`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ppokit.rewards.errors import RewardError
from ppokit.rewards.judge.clients import JudgeClient, JudgeReply
from ppokit.rewards.judge.templates import Template, parse_choice, parse_p_yes, parse_score, parse_yes_no

log = logging.getLogger("ppokit")
NOTE_CHARS = 2000  # verdict text kept per call in samples.jsonl


@dataclass
class RewardReport:
    """What a reward source did on its last batch: step metrics and one note dict per answer (for samples.jsonl)."""

    metrics: dict[str, float] = field(default_factory=dict)
    notes: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class _Job:
    item: int
    part: str  # "score" | "A" (answer first) | "B" (answer second) | rubric item text
    messages: list[dict]


def _text(value: Any) -> str | None:
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else None
    return None if value is None else str(value)


class JudgeReward:
    """A RewardFn asking `client` with `template`; see the module docstring. `on_error`: raise | skip_group."""

    def __init__(self, client: JudgeClient, template: Template, rubric: Sequence[str] | None = None,
                 on_error: str = "raise", score_range: tuple[float, float] = (1.0, 10.0)):
        if on_error not in ("raise", "skip_group"):
            raise RewardError(f"reward_on_error is {on_error!r}; use 'raise' or 'skip_group'")
        if not score_range[0] < score_range[1]:
            raise RewardError(f"judge_score_range {list(score_range)}: the lowest score must be below the highest (a "
                              "verdict's score is mapped from [lowest, highest] onto 0..1), e.g. [1, 10]")
        if template.mode == "pairwise" and template.parser != "choice":
            raise RewardError(f"a pairwise judge template needs judge_parser: choice, not {template.parser!r}")
        self.client, self.template, self.rubric = client, template, list(rubric or [])
        self.on_error, self.score_range = on_error, score_range
        self.unparsed_total = self.errors_total = 0  # over the run, for the server's log and the final note
        self._report: RewardReport | None = None

    def take_report(self) -> RewardReport | None:
        """The last batch's report, once (None when nothing was scored since the last take)."""
        report, self._report = self._report, None
        return report

    # -------------------------------------------------------------- the call

    def __call__(self, prompts: list[str], responses: list[str], label: list | None = None,
                 records: list[dict] | None = None, **fields: list) -> list[float | None]:
        started = time.perf_counter()
        jobs = self._jobs(prompts, responses, label or [None] * len(responses), records, fields)
        replies = self.client.complete([j.messages for j in jobs]) if jobs else []
        if len(replies) != len(jobs):
            raise RewardError(f"the judge {self.client.name} gave {len(replies)} replies for {len(jobs)} questions")
        values, notes, unparsed, errors = self._combine(len(responses), jobs, replies)
        self.unparsed_total += len(unparsed)
        self.errors_total += len(errors)
        self._report = RewardReport(notes=notes, metrics={
            "reward/judge_unparsed": float(len(unparsed)), "reward/judge_errors": float(len(errors)),
            "timing/judge_s": time.perf_counter() - started, "judge/tokens": float(sum(r.tokens for r in replies)),
            "judge/calls": float(len(jobs))})
        failed = sorted(set(unparsed) | set(errors))
        if failed:
            self._fail(failed, unparsed, errors, records)
        return values

    def _fail(self, failed: list[int], unparsed: dict[int, str], errors: dict[int, str], records) -> None:
        first = failed[0]
        source = (records[first].get("source") if records and first < len(records) else None) or f"item {first}"
        why = (f"its verdict did not parse as {self.template.parser}: {unparsed[first][:300]!r}" if first in unparsed
               else errors[first])
        what = f"{plural(len(unparsed), 'unparsed verdict')} and {plural(len(errors), 'failed judge call')}"
        if self.on_error == "raise":  # a failed call's error says what to check; an unparsed verdict, the format
            fix = (f"Fix the template or judge_parser so that the judge answers as {self.template.parser} reads it"
                   if first in unparsed else "Fix what the error names")
            raise RewardError(f"the judge ({self.client.name}, template {self.template.name}) could not score "
                              f"{plural(len(failed), 'answer')} ({what}); first, {source}: {why}. {fix}, or set "
                              "reward_on_error: skip_group to drop such groups (counted)",
                              first, source if records else None)
        log.warning("judge: %s unscored (%s), their groups are skipped; first, %s: %s", plural(len(failed), "answer"),
                    what, source, why)

    def _jobs(self, prompts, responses, labels, records, fields) -> list[_Job]:
        from ppokit.data.render import question_text

        rubrics = fields.get("rubric")
        jobs: list[_Job] = []
        for i, answer in enumerate(responses):
            question = question_text(records[i] if records else None, prompts[i])
            reference = _text(labels[i])
            base = {"question": question, "answer": answer, "reference": reference}
            mode = self.template.mode
            if reference is None and self.template.needs_reference:
                raise RewardError(f"the judge template {self.template.name} compares each answer with the reference "
                                  f"answer, but {_where(i, records)} has none (no label / tgt); give one, or use "
                                  "judge_template: score_10", i)
            if mode == "score":
                jobs.append(_Job(i, "score", self.template.render(**base)))
            elif mode == "pairwise":
                if reference is None:
                    raise RewardError(f"the pairwise judge compares each answer with the reference answer, but "
                                      f"{_where(i, records)} has none (no label / tgt); give one, or use "
                                      "judge_template: score_10", i)
                jobs.append(_Job(i, "A", self.template.render(**base, answer_a=answer, answer_b=reference)))
                jobs.append(_Job(i, "B", self.template.render(**base, answer_a=reference, answer_b=answer)))
            else:
                items = (rubrics[i] if rubrics and rubrics[i] else None) or self.rubric
                if not items:
                    raise RewardError(f"the rubric judge has no rubric items for {_where(i, records)}; set "
                                      "judge_rubric: [\"...\", ...] or give records a 'rubric' field", i)
                jobs.extend(_Job(i, str(item), self.template.render(**base, item=item)) for item in items)
        return jobs

    def _combine(self, n: int, jobs: list[_Job], replies: list[JudgeReply]):
        """(values, notes, unparsed {item: verdict}, errors {item: why}); values None where an item failed."""
        parts: list[list[float]] = [[] for _ in range(n)]
        notes: list[dict] = [{"judge_verdict": []} for _ in range(n)]
        unparsed: dict[int, str] = {}
        errors: dict[int, str] = {}
        for job, reply in zip(jobs, replies):
            tag = "" if job.part == "score" else f"[{job.part}] "
            notes[job.item]["judge_verdict"].append(tag + (reply.text[:NOTE_CHARS] if reply.error is None
                                                           else f"ERROR: {reply.error}"))
            if reply.error is not None:
                errors.setdefault(job.item, reply.error)
                continue
            value = self._parse(job, reply)
            if value is None:
                unparsed.setdefault(job.item, reply.text)
            else:
                parts[job.item].append(value)
        values: list[float | None] = []
        for i in range(n):
            ok = i not in unparsed and i not in errors and parts[i]
            values.append(sum(parts[i]) / len(parts[i]) if ok else None)
            notes[i]["judge_verdict"] = "\n---\n".join(notes[i]["judge_verdict"])
        return values, notes, unparsed, errors

    def _parse(self, job: _Job, reply: JudgeReply) -> float | None:
        parser, text = self.template.parser, reply.text
        if parser == "p_yes":
            return parse_p_yes(reply.first_token_probs)
        if parser == "choice":
            choice = parse_choice(text)
            if choice is None:
                return None
            if self.template.mode != "pairwise":
                return {"A": 1.0, "B": 0.0, "tie": 0.5}[choice]
            if choice == "tie":
                return 0.5
            return 1.0 if choice == job.part else 0.0  # job.part is the answer's position in this call
        if parser == "yes_no":
            return parse_yes_no(text)
        return parse_score(text, *self.score_range)


def _where(i: int, records) -> str:
    source = records[i].get("source") if records and i < len(records) else None
    return f"record {i} (source {source!r})" if source else f"record {i}"


def plural(n: int, noun: str) -> str:
    """"1 answer", "2 answers"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
