import pytest

from ppokit.tasks import TASKS, TaskError, get


def test_registry_names_and_aliases():
    assert list(TASKS) == ["knights_knaves", "arithmetic", "countdown", "gsm8k", "math", "multiply"]
    assert get("kk") is get("knights_knaves") is TASKS["knights_knaves"]
    assert get("arithmetic").name == "arithmetic"


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(
        TaskError,
        match=r"unknown task 'arithmetics'; known tasks: knights_knaves, arithmetic, countdown, gsm8k, math, multiply\. Did you mean 'arithmetic'\?",
    ):
        get("arithmetics")


def test_tasks_do_not_import_torch():
    import subprocess
    import sys

    code = "import sys, ppokit.tasks, ppokit.data; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_score_rejects_non_string_responses():
    with pytest.raises(TaskError, match="the response must be a string"):
        get("arithmetic").score(None, {"label": "1"})
