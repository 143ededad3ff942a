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
