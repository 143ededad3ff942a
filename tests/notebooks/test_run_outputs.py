"""What a finished Session run leaves behind: the files `python -m ppokit.tracking.report` reads, and VisualDL records."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
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
    reward = [(r.id, r.value) for r in reader.get_data("scalar", "0 reward and eval/reward/mean")]
    expected = [(r["step"], r["reward/mean"]) for r in rows(tiny_run.out / "metrics.jsonl") if "reward/mean" in r]
    assert [s for s, _ in reward] == [1, 2, 3, 4]
    assert [round(v, 5) for _, v in reward] == [round(v, 5) for _, v in expected]
    assert [r.id for r in reader.get_data("scalar", "0 reward and eval/eval/pass@2")] == [2, 4]
    texts = reader.get_data("text", "samples/1 · from step 1")  # a tag per sample (and 10 steps): one line each
    assert [t.id for t in texts] == [1, 2, 3, 4]
    assert " · Q: What is" in texts[0].text.encoded_text_string and " · A: " in texts[0].text.encoded_text_string
    (hparams,) = reader.get_data("hyper_parameters", "hparam")
    names = {h.name for h in hparams.hparam.hparamInfos}
    assert {"learning_rate", "rollout_n", "max_steps", "rl_algorithm"} <= names


class _Page(HTMLParser):
    """The text a reader meets, in page order, split at each heading; and every resource the page would load."""

    def __init__(self):
        super().__init__()
        self.blocks: list[list[str]] = [[]]
        self.loads: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("h1", "h2"):
            self.blocks.append([])
        if tag in ("script", "style", "title"):
            self.skip += 1
        for key in ("src", "href"):
            if attrs.get(key) and not attrs[key].startswith("#"):
                self.loads.append(attrs[key])

    def handle_endtag(self, tag):
        if tag in ("script", "style", "title"):
            self.skip -= 1

    def handle_data(self, data):
        if not self.skip and data.strip():
            self.blocks[-1].append(data.strip())


def test_the_report_opens_on_what_the_run_did(tiny_run, tmp_path):
    """The static page as a reader sees it (no browser needed: it runs no script): first the title, then what ran
    and its outcome as the console said it (steps, wall time, reward and eval first → last), then the charts."""
    from ppokit.tracking.console import span_line
    from ppokit.tracking.report import build_report

    page = _Page()
    page.feed(build_report(tiny_run.out, tmp_path / "report.html").read_text())
    assert page.loads == [] and "<script" not in (tmp_path / "report.html").read_text()  # offline, inert
    assert page.blocks[0] == []  # nothing before the title
    title, top = page.blocks[1][0], page.blocks[1][1:]
    assert title.startswith("ppokit report")
    assert top[0].startswith("GRPO on ") and re.fullmatch(
        r"4 steps in (\d+ min )?\d+ s, \d+\.\d s per training step \(median\); outside the steps: evaluations "
        r"\d+\.\d s, final save \d+\.\d s", top[1]), top[1]
    history = rows(tiny_run.out / "metrics.jsonl")
    merged = {}
    for row in history:
        merged.setdefault(row["step"], {}).update(row)
    history = list(merged.values())
    assert top[2] == span_line(history, "reward/mean", "reward") and "→" in top[2]
    assert top[3] == span_line(history, "eval/accuracy", "eval accuracy") and top[3].endswith("at step 4")
    assert page.blocks[2][0] == "Reward"  # the first section under the top


def test_the_report_keeps_one_off_work_out_of_the_per_step_means_and_derived_keys_out_of_changed(tiny_run, tmp_path):
    """'Mean time per phase' is per step: the evaluations and the final save are a sentence of their own; the
    arguments a person changed are in bold, the ones ppokit derived from them are not."""
    from ppokit.tracking.report import build_report

    page = build_report(tiny_run.out, tmp_path / "report.html").read_text()
    section = page[page.index("<h2>Time per phase</h2>"):]
    section = section[:section.index("<h2>", 10)]
    assert re.search(r"outside the steps: evaluations [\d.]+ s \(2 × [\d.]+ s\); final save [\d.]+ s", section)
    bars = section[section.index('aria-label="Mean time per step and phase"'):]
    assert ">eval_s<" not in bars and ">final_save_s<" not in bars and ">step_s<" in bars
    changed = re.findall(r"<tr><td><b>([a-z_]+)</b></td>", page)
    assert "max_steps" in changed and "learning_rate" in changed
    assert not {"decay_steps", "max_src_len", "per_device_rollout_batch_size"} & set(changed), changed
    assert "No effect in this run: " in page and "kl_coeff (rl_algorithm=grpo puts no KL in the reward" in page
