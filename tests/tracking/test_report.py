"""The HTML report, built from metrics/samples/args files written by hand (and by a Tracker)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.tracking import ReportError, Tracker
from ppokit.tracking.report import build_report, main

EXTERNAL = re.compile(r"""(src|href)\s*=\s*["']?\s*(https?:)?//|url\(\s*["']?(https?:)?//|@import""", re.I)


def write_run(
    out: Path, steps: int = 12, truncated: bool = False, samples: bool = True, args: bool = True
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for s in range(1, steps + 1):
        row = {
            "step": s,
            "time": 2.0 * s,
            "reward/mean": s / steps,
            "reward/std": 0.1,
            "response_length/mean": 30 + s,
            "actor/kl": 0.001 * s,
            "actor/entropy": 1.0,
            "actor/clipfrac": 0.02,
            "actor/grad_norm": 0.5,
            "actor/lr": 1e-6,
            "actor/pg_loss": -0.01,
            "kl/beta": 0.02,
            "timing/rollout_s": 1.5,
            "timing/update_s": 0.5,
            "custom/thing": s,
        }
        lines.append(json.dumps(row))
        if s % 4 == 0:
            lines.append(json.dumps({"step": s, "time": 2.0 * s + 1, "eval/accuracy": s / 20}))
    text = "\n".join(lines) + "\n"
    if truncated:
        text += '{"step": 13, "time": 26.0, "reward/me'
    (out / "metrics.jsonl").write_text(text)
    if samples:
        with (out / "samples.jsonl").open("w") as f:
            for s in (1, 6, 12):
                row = {"step": s, "prompt": f"prompt at {s} & <b>bold</b>", "reward": 1.0, "advantage": -0.5}
                row["response"] = f"step-{s} says <script>alert('x')</script>"
                f.write(json.dumps(row) + "\n")
    if args:
        (out / "args.json").write_text(
            json.dumps({"max_steps": steps, "rl_algorithm": "grpo", "reward_server": "http://127.0.0.1:8731"})
        )


def test_complete_run_report(tmp_path):
    out = tmp_path / "run"
    write_run(out)
    path = build_report(out)
    assert path == out / "report.html"
    html = path.read_text()
    assert html.count("<svg") >= 8
    for title in ("Reward by step", "Reward by wall time", "Response length", "KL divergence", "Entropy"):
        assert f'aria-label="{title}"' in html
    for title in ("KL coefficient", "Clip fraction", "Gradient norm", "Learning rate", "Time per phase", "eval/accuracy"):
        assert f'aria-label="{title}"' in html
    assert "<polygon" in html  # the ± std band
    assert "finished" in html
    assert "custom/thing" in html  # unplotted metrics are listed
    assert "rl_algorithm" in html and "grpo" in html
    assert not EXTERNAL.search(html)


def test_samples_from_first_middle_and_last_step_are_escaped(tmp_path):
    out = tmp_path / "run"
    write_run(out)
    html = build_report(out).read_text()
    assert "<script>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "&amp;" in html
    for step in (1, 6, 12):
        assert f"step-{step} says" in html
    assert "first logged" in html and "middle logged" in html and "last logged" in html


def test_interrupted_run_skips_the_incomplete_line_and_says_so(tmp_path):
    out = tmp_path / "run"
    write_run(out, steps=12, truncated=True, samples=False, args=False)
    html = build_report(out).read_text()
    assert "incomplete" in html and "line" in html
    assert "interrupted (last complete row at step 12)" in html
    assert "samples.jsonl: not recorded" in html
    assert "args.json: not recorded" in html
    assert "<svg" in html


def test_run_without_optional_metrics_says_not_recorded(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": 1.0, "reward/mean": 0.5}) + "\n")
    html = build_report(out).read_text()
    assert "timing/*: not recorded" in html and "eval/*: not recorded" in html
    assert "KL divergence" in html and "not recorded" in html


def test_empty_metrics_file_still_builds(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text("")
    html = build_report(out).read_text()
    assert "no readable rows" in html


def test_report_of_a_tracker_run(tmp_path):
    out = tmp_path / "run"
    with Tracker(out, logging_dir=tmp_path / "vdl") as t:
        t.log_hparams({"max_steps": 3})
        for step in (1, 2, 3):
            t.log(step, {"reward/mean": step / 3, "reward/std": 0.2, "actor/kl": float("nan")})
        t.log_samples(3, [{"prompt": "p", "response": "</pre><img src=x onerror=alert(1)>", "reward": 1.0}])
    html = build_report(out, out=tmp_path / "elsewhere" / "r.html").read_text()
    assert "<img" not in html and "&lt;/pre&gt;&lt;img" in html
    assert "finished" in html


def test_missing_metrics_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(ReportError, match="no metrics.jsonl"):
        build_report(tmp_path)
    assert main([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_module_entry_point(tmp_path):
    out = tmp_path / "run"
    write_run(out, steps=4)
    target = tmp_path / "custom.html"
    done = subprocess.run(
        [sys.executable, "-m", "ppokit.tracking.report", str(out), "--out", str(target)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert done.stderr == ""  # no runpy "found in sys.modules" RuntimeWarning: the module is imported once
    failed = subprocess.run(
        [sys.executable, "-W", "error", "-m", "ppokit.tracking.report", str(tmp_path)], capture_output=True,
        text=True
    )
    assert failed.returncode == 2 and "metrics.jsonl" in failed.stderr and "Warning" not in failed.stderr


def test_two_reward_functions_get_their_chart(tmp_path):
    rows = [{"step": s, "reward/mean": s / 2, "reward/rule": s / 4, "reward/format": s / 4} for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = build_report(tmp_path).read_text()
    functions = page[page.index('aria-label="Reward by function"'):]
    functions = functions[: functions.index("</svg>")]
    assert "reward/rule" in functions and "reward/format" in functions
    assert 'stroke-dasharray="7 4"' in functions  # the second line is dashed: equal values stay visible


def test_identical_eval_metrics_share_one_chart_and_a_constant_is_a_sentence(tmp_path):
    rows = [{"step": s, "eval/mean@1": a, "eval/pass@1": a, "eval/maj@1": a, "eval/accuracy": a,
             "eval/prompts": 30.0} for s, a in ((10, 0.8), (20, 0.9), (30, 1.0))]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = build_report(tmp_path).read_text()
    evaluation = page[page.index("<h2>Evaluation</h2>"):]
    evaluation = evaluation[: evaluation.index("<h2>", 5)]
    assert evaluation.count("<svg") == 1
    assert 'aria-label="eval/accuracy"' in evaluation and "evaluated at steps 10, 20, 30</p>" in evaluation
    said = page[page.index("<h2>Not charted</h2>"):]  # once, for this page and VisualDL alike
    for copy in ("eval/mean@1", "eval/pass@1", "eval/maj@1"):
        assert f"<code>{copy}</code>: the same as eval/accuracy at every step" in said
    assert "<code>eval/prompts</code>: constant 30: the size of the eval set" in said


def test_the_top_names_model_algorithm_data_and_shape_and_the_arguments_put_changes_first(tmp_path):
    from ppokit.args import load_arguments

    args = load_arguments(None, overrides=dict(
        actor_model_name_or_path="smollm2-135m-instruct", train_datasets="data/arithmetic/train.jsonl",
        eval_datasets="data/arithmetic/test.jsonl", rl_algorithm="grpo", global_batch_size=8, rollout_n=4,
        global_mini_batch_size=8, per_device_train_batch_size=16, max_steps=30, learning_rate=2e-5,
        use_rule_reward=True, do_eval=True, eval_steps=10, output_dir=str(tmp_path / "out"),
        logging_dir=str(tmp_path / "vdl")))
    from ppokit.args.batch import batch_plan

    out = tmp_path / "out"
    with Tracker(out, logging_dir=tmp_path / "vdl") as t:
        t.log_hparams(args, plan=batch_plan(args))
        t.log(30, {"reward/mean": 1.0})
    state = json.loads((out / "tracking_state.json").read_text())
    state["wall_s"] = 175.0  # as a run of 2 min 55 s leaves it
    (out / "tracking_state.json").write_text(json.dumps(state))
    page = build_report(out).read_text()
    top = page[: page.index("<h2>")]
    assert ("GRPO on smollm2-135m-instruct · data data/arithmetic/train.jsonl (eval data/arithmetic/test.jsonl) · "
            "rule rewards · 30 steps × 8 prompts × 4 responses (32 sequences per step, 1 optimizer step each)") in top
    assert "2 min 55 s (from the start of training" in top and "finished" in top
    arguments = page[page.index("<h2>Arguments</h2>"):]
    groups = re.findall(r"<h3>(\w+) <small>", arguments)
    assert groups[:4] == ["model", "data", "algorithm", "optimisation"]
    optimisation = arguments[arguments.index("<h3>optimisation"):]
    first_rows = re.findall(r"<tr><td><b>([^<]+)</b></td><td>([^<]*)</td><td>([^<]*)</td>", optimisation)
    assert ("learning_rate", "2e-05", "5e-05") in first_rows[:6]  # changed: value and default side by side
    assert ">stage<" not in page and "no effect here: " in page  # "stage PPO" is informational only


def test_flat_kl_gets_a_note_counts_leave_the_reward_functions_and_the_band_stays_in_range(tmp_path):
    from ppokit.tracking.report import KL_OFF_NOTE

    rows = [{"step": s, "reward/mean": 0.5, "reward/std": 0.6, "reward/min": 0.0, "reward/max": 1.0,
             "reward/rule": 0.5, "reward/raw_mean": 0.5, "reward/skipped_groups": 3.0, "actor/approx_kl": 0.0}
            for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = build_report(tmp_path).read_text()
    assert html.escape(KL_OFF_NOTE) in page
    assert 'aria-label="Reward by function"' not in page  # one reward function: its chart would copy the mean
    assert "<code>reward/raw_mean</code>: the same as reward/mean at every step" in page
    assert "<code>reward/rule</code>: the same as reward/mean at every step" in page
    assert page.count("reward/raw_mean") == 1  # said once: not again under other metrics
    assert "<td>reward/skipped_groups</td>" in page  # the count is listed with the other metrics
    by_step = page[page.index('aria-label="Reward by step"'):]
    by_step = by_step[: by_step.index("</svg>")]
    ticks = re.findall(r'text-anchor="middle">([^<]+)</text>', by_step)
    assert ticks[:3] == ["1", "2", "3"]  # whole steps only
    grid = dict(zip(re.findall(r'text-anchor="end">([^<]+)</text>', by_step),
                    (float(y) for y in re.findall(r'<line x1="64" y1="([\d.]+)"', by_step))))
    band = [float(y) for y in re.findall(r",([\d.]+)", re.search(r'<polygon points="([^"]+)"', by_step).group(1))]
    assert grid["1"] - 0.1 <= min(band) and max(band) <= grid["0"] + 0.1  # mean ± std clipped to the rewards [0, 1]


def test_the_band_is_clipped_to_each_steps_reward_range():
    from ppokit.tracking.svg import std_band

    lo, hi = std_band([0.5, 0.9, None], [0.6, 0.3, 0.1], [0.0, 0.5, None], [1.0, 1.0, None])
    assert lo == [0.0, pytest.approx(0.6)] + [None] and hi == [1.0, 1.0, None]


def test_samples_show_the_question_with_the_full_prompt_folded(tmp_path):
    chatml = "<|im_start|>system\nYou are SmolLM<|im_end|>\n<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n"
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 1.0}) + "\n")
    (tmp_path / "samples.jsonl").write_text(json.dumps(
        {"step": 1, "question": "What is 3 + 4?", "prompt": chatml, "response": "7", "reward": 1.0}) + "\n")
    page = build_report(tmp_path).read_text()
    sample = page[page.index('<div class="sample">'):]
    assert sample.index("<pre>What is 3 + 4?</pre>") < sample.index("<details><summary>full prompt</summary>")
    assert sample.index("<summary>full prompt</summary>") < sample.index("You are SmolLM")  # folded, one click away


def test_the_headline_says_what_the_console_says_and_the_wall_time_gaps_are_explained(tmp_path):
    from ppokit.tracking.console import run_summary

    rows, t = [], 0.0
    for s in range(1, 7):
        t += 2.0
        row = {"step": s, "time": t, "reward/mean": s / 10, "timing/step_s": 2.0, "response_length/clip_ratio": 0.25,
               "actor/clipfrac": 0.1 * s}
        if s == 3:  # an evaluation of 30 s after step 3, and the save the plan says comes with it
            row.update({"eval/accuracy": 0.5, "timing/eval_s": 30.0})
            t += 30.0
        if s == 6:
            row["eval/accuracy"] = 0.75
        rows.append(row)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "tracking_state.json").write_text(json.dumps({"wall_s": 45.0}))
    (tmp_path / "args_info.json").write_text(json.dumps({"plan": {"rollout_steps": 6, "save_every": "every 3 steps"}}))
    page = build_report(tmp_path).read_text()
    console = run_summary(rows, tmp_path, 45.0).splitlines()[:3]  # what the console ends a run with
    headlines = re.findall(r'<p class="headline"><b>([^<]+)</b></p>', page)
    assert headlines == [html.escape(console[0].removeprefix("done: "))] + [html.escape(x) for x in console[1:]]
    assert headlines[0] == "6 steps in 45 s, 2.0 s per training step (median); outside the steps: evaluations 30.0 s"
    assert headlines[2] == "eval accuracy 0.50 at step 3 → 0.75 at step 6"
    assert "steps 3 → 4: 30 s more than a step, an evaluation (30.0 s) and a checkpoint save" in page
    clip = page[page.index('aria-label="Clip fraction"'):]
    clip = clip[: clip.index("</svg>")]
    assert "actor/clipfrac" in clip and "clip_ratio" not in clip  # PPO's clip, not responses cut at max_dec_len
    assert 'aria-label="Responses cut at max_dec_len"' in page
