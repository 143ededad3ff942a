"""Built-in tasks: a generator of src/tgt rows and a verifier for each, registered by name.

    from ppokit.tasks import get, TASKS
    kk = get("knights_knaves")
    rows = kk.generate(100, seed=0, people=5)
    kk.score(response, record)                  # 3.0 / -0.5 / -1.0 / -3.0
    kk.score(response, record, details=True)    # (score, {"verdict": ..., ...})

No torch here: tasks are plain Python and may run inside a reward server.

May import: nothing of ppokit's (plain Python).
"""

from __future__ import annotations

import difflib

from ppokit.tasks import arithmetic, countdown, gsm8k, knights_knaves, math_boxed, multiply
from ppokit.tasks.task import Task, TaskError

TASKS: dict[str, Task] = {
    t.name: t for t in (knights_knaves.TASK, arithmetic.TASK, countdown.TASK, gsm8k.TASK, math_boxed.TASK,
                        multiply.TASK)
}
ALIASES = {"kk": "knights_knaves", "ppo-kk": "knights_knaves", "knights_and_knaves": "knights_knaves"}
# verl's data_source values whose default scorer these tasks reproduce (verl.utils.reward_score).
VERL_DATA_SOURCES = {"openai/gsm8k": "gsm8k", "lighteval/MATH": "math", "DigitalLearningGmbH/MATH-lighteval": "math",
                     "HuggingFaceH4/MATH-500": "math"}
ALIASES.update(VERL_DATA_SOURCES)


def get(name: str) -> Task:
    """The task called `name` (or an alias such as "kk"); an unknown name lists the known ones."""
    key = ALIASES.get(name, name) if isinstance(name, str) else name
    if key in TASKS:
        return TASKS[key]
    close = difflib.get_close_matches(str(name), list(TASKS) + list(ALIASES), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}.{hint}")


__all__ = ["ALIASES", "TASKS", "VERL_DATA_SOURCES", "Task", "TaskError", "get"]
