"""Rows in the layout of verl's gsm8k / MATH preprocessing, written from the built-in generators.

verl's ``examples/data_preprocess/{gsm8k,math_dataset}.py`` write parquet rows with ``data_source``,
``prompt`` (chat messages), ``ability``, ``reward_model: {style: rule, ground_truth}`` and ``extra_info``.
`verl_rows` writes the same fields from ppokit's offline gsm8k / math generators, so verl launch lines
can be tried without a download; real verl files load the same way (see docs/verl.md).
"""

from __future__ import annotations

from ppokit.tasks import get
from ppokit.tasks.math_answer import gsm8k_answer, last_boxed

DATA_SOURCES = {"gsm8k": "openai/gsm8k", "math": "DigitalLearningGmbH/MATH-lighteval"}


def verl_rows(task: str, n: int, seed: int = 0, split: str = "train") -> list[dict]:
    """``n`` verl-layout rows of the built-in ``task`` ('gsm8k' or 'math')."""
    if task not in DATA_SOURCES:
        raise ValueError(f"verl_rows: task must be one of {sorted(DATA_SOURCES)}, got {task!r}")
    rows = []
    for index, row in enumerate(get(task).generate(n, seed=seed)):
        question, solution = row["src"][0], row["tgt"][0]
        answer = gsm8k_answer(solution) if task == "gsm8k" else last_boxed(solution)
        rows.append({
            "data_source": DATA_SOURCES[task],
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": index, "answer": solution, "question": question},
        })
    return rows


# ---- verl's multi-turn rows: `agent_name: tool_agent`, `extra_info.tools_kwargs.<tool>.create_kwargs`

TOOL_AGENT = "tool_agent"


def row_is_multi_turn(record: dict) -> bool:
    """Whether a record of a multi_turn run may call tools: verl rows (those with a data_source) only with
    `agent_name: tool_agent` (verl's default agent is single-turn); ppokit's own rows unless their
    agent_name names another agent."""
    fields = record.get("fields") or {}
    name = fields.get("agent_name")
    if name is not None:
        return name == TOOL_AGENT
    return "data_source" not in fields


def tools_kwargs_of(record: dict) -> dict:
    """verl's per-row tool arguments {tool: {"create_kwargs": {...}, ...}} from extra_info.tools_kwargs ({} if none).

    Raises ValueError naming the record when tools_kwargs is there but is not a mapping of tool names."""
    fields = record.get("fields") or {}
    extra = fields.get("extra_info") if isinstance(fields.get("extra_info"), dict) else {}
    kwargs = extra.get("tools_kwargs") or {}
    if not isinstance(kwargs, dict) or not all(isinstance(v, dict) for v in kwargs.values()):
        raise ValueError(f"{record.get('source', 'a record')}: extra_info.tools_kwargs must map each tool name to "
                         f"{{'create_kwargs': {{...}}}}, got {kwargs!r:.80}")
    return kwargs
