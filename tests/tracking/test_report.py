"""The HTML report, built from metrics/samples/args files written by hand (and by a Tracker)."""

from __future__ import annotations

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
    failed = subprocess.run(
        [sys.executable, "-m", "ppokit.tracking.report", str(tmp_path)], capture_output=True, text=True
    )
    assert failed.returncode == 2 and "metrics.jsonl" in failed.stderr
