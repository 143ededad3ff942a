"""What a finished Session run leaves behind: the files `python -m ppokit.tracking.report` reads, and VisualDL records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_session_run_writes_args_metrics_and_samples(tiny_run):
    args = json.loads((tiny_run.out / "args.json").read_text())
    assert args["max_steps"] == 4 and args["rl_algorithm"] == "grpo"
    metrics = rows(tiny_run.out / "metrics.jsonl")
    assert [r["step"] for r in metrics if "reward/mean" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in metrics if "eval/pass@2" in r] == [2, 4]
    samples = rows(tiny_run.out / "samples.jsonl")
    assert sorted({r["step"] for r in samples}) == [1, 2, 3, 4]  # logging_steps=1: samples every step
    assert {"prompt", "response", "reward", "advantage", "reward/distinct_chars"} <= set(samples[0])


def test_the_report_builds_from_a_session_run(tiny_run, tmp_path):
    out = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "ppokit.tracking.report", str(tiny_run.out), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "<svg" in page and "reward/mean" in page and "pass@2" in page  # its chart (or one it equals)
    assert "What is" in page  # the sampled arithmetic prompts
    assert "GRPO on " in page and "4 steps × 2 prompts × 4 responses" in page  # the top says what ran
    assert "found in sys.modules" not in done.stderr


def test_visualdl_has_reward_curve_eval_scalars_sample_texts_and_hparams(tiny_run):
    from visualdl import LogReader

    (record_file,) = list(tiny_run.vdl.glob("*/vdlrecords*"))  # in the run's own folder, named after it
    assert record_file.parent.name == tiny_run.out.name
    reader = LogReader(file_path=str(record_file))
    reward = [(r.id, r.value) for r in reader.get_data("scalar", "1 reward/mean")]
    expected = [(r["step"], r["reward/mean"]) for r in rows(tiny_run.out / "metrics.jsonl") if "reward/mean" in r]
    assert [s for s, _ in reward] == [1, 2, 3, 4]
    assert [round(v, 5) for _, v in reward] == [round(v, 5) for _, v in expected]
    assert [r.id for r in reader.get_data("scalar", "2 eval/pass@2")] == [2, 4]
    texts = reader.get_data("text", "samples/1 · from step 1")  # a tag per sample (and 10 steps): one line each
    assert [t.id for t in texts] == [1, 2, 3, 4]
    assert " · Q: What is" in texts[0].text.encoded_text_string and " · A: " in texts[0].text.encoded_text_string
    (hparams,) = reader.get_data("hyper_parameters", "hparam")
    names = {h.name for h in hparams.hparam.hparamInfos}
    assert {"learning_rate", "rollout_n", "max_steps", "rl_algorithm"} <= names
