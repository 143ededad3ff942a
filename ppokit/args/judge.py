"""The LLM judge's keys (a reward source, see ppokit/rewards/judge/ and docs/rewards.md), declared once: a
config reads them here and reward_server.py's --judge-* options are generated from them
(ppokit/rewards/judge/options.py). verl configures its generative reward model through its reward loop's own
config tree, which has no flat keys to accept here."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from .model_data import GROUP_CONFIG


class JudgeArguments(BaseModel):
    """Keys of the LLM judge reward source; PaddleNLP files never contain them."""

    model_config = GROUP_CONFIG

    judge_model: str | None = Field(
        None, description="LLM judge as a reward source (logged as reward/judge, weighted by reward_weights): a "
        "model folder, .gguf file or alias judged in this process (its own copy of the weights), or the URL of an "
        "OpenAI-compatible /v1/chat/completions endpoint; None = no judge.")
    judge_backend: Literal["hf", "vllm", "openai"] | None = Field(
        None, description="How the judge runs: hf (transformers in this process), vllm (its own vLLM engine) or "
        "openai (HTTP endpoint); None -> openai for an http(s) judge_model, else hf.")
    judge_api_model: str | None = Field(
        None, description="The model name sent to the judge endpoint; None -> the first id its /v1/models lists.")
    judge_allow_remote: bool = Field(
        False, description="Allow a judge endpoint that is not on this machine (loopback only by default).")
    judge_template: str = Field(
        "score_10", description="Judge prompt: score_10 (1-10 against the reference answer), pairwise (answer vs "
        "reference, both orders), rubric (each judge_rubric item yes/no), yes_no (is the answer correct), "
        "yes_no_fewshot (does the answer equal the reference answer, after 4 worked examples; with judge_parser p_yes "
        "for small judges), or a file path / inline Jinja or {format} template of your own.")
    judge_parser: Literal["score", "choice", "yes_no", "p_yes"] | None = Field(
        None, description="How a verdict becomes a number: score ('Score: N' on judge_score_range -> 0..1), choice "
        "('Verdict: A|B|tie'), yes_no ('Verdict: yes|no' or a first word yes/no), p_yes (P(yes)/(P(yes)+P(no)) of "
        "the first verdict token, for small judges); None -> the template's own (score for a user template).")
    judge_rubric: list[str] | None = Field(
        None, description="Rubric items for judge_template rubric (a record's 'rubric' field overrides them).")
    judge_score_range: tuple[float, float] = Field(
        (1.0, 10.0), description="The [lowest, highest] score the score parser accepts, mapped onto 0..1; the "
        "lowest below the highest (--judge_score_range 0,100 or [0, 100]).")
    judge_max_new_tokens: int = Field(256, ge=1, description="Most tokens the judge writes per verdict.")
    judge_temperature: float = Field(
        0.0, ge=0.0, description="Judge sampling temperature; 0 = greedy, which repeats exactly.")
    judge_batch_size: int = Field(
        8, ge=1, description="Judge prompts per generate call of an in-process (hf) judge.")
    judge_concurrency: int = Field(
        8, ge=1, description="Judge requests in flight at once to an endpoint (openai backend).")

    @field_validator("judge_score_range")
    @classmethod
    def _lowest_below_highest(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not low < high:
            raise ValueError(f"the lowest score ({low:g}) must be below the highest ({high:g}): a verdict's score is "
                             "mapped from [lowest, highest] onto 0..1, e.g. [1, 10]")
        return value
