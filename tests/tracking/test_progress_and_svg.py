"""Console progress line and summary; the SVG chart primitives."""

from __future__ import annotations

import sys

import pytest

from ppokit.tracking import ConsoleProgress, format_summary, render_samples_markdown
from ppokit.tracking.svg import Series, bar_chart, line_chart, nice_ticks


def test_format_summary_matches_the_documented_layout():
    metrics = {
        "reward/mean": 0.62,
        "reward/std": 0.31,
        "response_length/mean": 41.23,
        "actor/kl": 0.003,
        "timing/rollout_s": 10.0,
        "timing/update_s": 2.4,
    }
    assert (
        format_summary(12, metrics, total=40)
        == "step 12/40 | reward 0.62±0.31 | len 41.2 | kl 0.003 | 12.4s/step"
    )


def test_a_step_followed_by_an_evaluation_names_it_outside_its_own_time():
    metrics = {"reward/mean": 0.5, "timing/rollout_s": 3.0, "timing/update_s": 5.0, "timing/eval_s": 63.04,
               "eval/accuracy": 0.9, "throughput/tokens_per_s": 34.0}
    assert format_summary(10, metrics, total=30) == \
        "step 10/30 | reward 0.5 | eval 0.9 | 8.0s/step | + evaluation 63.0s | 34 tok/s"


def test_format_summary_leaves_out_what_was_not_logged():
    assert format_summary(3, {"reward/mean": 0.5, "actor/kl": float("nan")}) == "step 3 | reward 0.5"
    assert format_summary(3, {"timing/step_s": 2.0, "timing/rollout_s": 1.5}) == "step 3 | 2.0s/step"


def test_console_progress_writes_bar_and_summary(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)  # as in a terminal
    with ConsoleProgress(total=4, desc="train") as bar:
        for step in range(1, 5):
            bar.update(step, {"reward/mean": step / 4})
        bar.write(format_summary(4, {"reward/mean": 1.0}, total=4))
    err = capsys.readouterr().err
    assert "train" in err and "4/4" in err and "reward=1" in err
    assert "step 4/4 | reward 1" in err


@pytest.mark.parametrize("bar", [True, False])
def test_without_a_terminal_or_with_disable_tqdm_only_the_step_lines_are_written(capsys, bar):
    with ConsoleProgress(total=4, desc="train", bar=bar) as progress:  # capsys: stderr is not a terminal
        for step in range(1, 5):
            progress.update(step, {"reward/mean": step / 4})
            progress.write(format_summary(step, {"reward/mean": step / 4}, total=4))
    err = capsys.readouterr().err
    assert err.splitlines() == [f"step {s}/4 | reward {s / 4:.3g}" for s in range(1, 5)]  # no bar frames


def test_disabled_progress_prints_nothing(capsys):
    bar = ConsoleProgress(total=3, disable=True)
    bar.update(1, {"reward/mean": 1.0})
    bar.write("hello")
    bar.close()
    assert capsys.readouterr() == ("", "")


def test_samples_markdown_indents_text_and_limits_count():
    rows = [{"question": "a\nb", "prompt": "<|im_start|>user\na\nb", "response": "```x", "reward": 1.0,
             "task": "kk"}] * 5
    text = render_samples_markdown(9, rows, shown=2)
    assert text.startswith("**step 9** · showing 2 of 5 samples")
    assert "    a\n    b" in text and "    ```x" in text and "im_start" not in text  # the question, not the template
    assert text.count("**#") == 2 and "reward **1**" in text and "task kk" in text


def test_nice_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 1) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(3, 97) == [20, 40, 60, 80]
    assert nice_ticks(-0.3, 0.25) == [-0.2, 0.0, 0.2]
    assert nice_ticks(1e-6, 1.2e-6) == [1e-6, 1.05e-6, 1.1e-6, 1.15e-6, 1.2e-6]
    assert nice_ticks(5, 5) == [5]


def test_line_chart_breaks_at_gaps_and_escapes_names():
    svg = line_chart([Series("<evil>", [1, 2, 3, 4], [1.0, None, 3.0, 4.0])], "a & b")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<path") == 2  # the gap at step 2 splits the line
    assert "&lt;evil&gt;" in svg and "a &amp; b" in svg and "<evil>" not in svg


def test_line_chart_without_values_says_so():
    assert "no finite values" in line_chart([Series("x", [1, 2], [None, float("nan")])], "empty")


def test_bar_chart_orders_largest_first():
    svg = bar_chart([("update_s", 1.0), ("rollout_s", 3.0)], "time", " s")
    assert svg.index("rollout_s") < svg.index("update_s") and "3 s" in svg
