"""The console a person sees: set-up stages, per-step lines apart from the bar, memory, the end summary."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ppokit.engine.quiet import captured_native_output
from ppokit.tasks import get
from ppokit.tracking import console, format_summary

REPO = Path(__file__).resolve().parents[2]


def test_stage_says_what_before_and_how_long_after(capsys):
    with console.stage("loading tiny-model"):
        pass
    lines = capsys.readouterr().err.splitlines()  # not a terminal: only the finished line, once
    assert len(lines) == 1 and re.fullmatch(r"ppokit: loading tiny-model… \d+\.\d s", lines[0])
    with pytest.raises(KeyError), console.stage("building the engine"):
        raise KeyError("x")
    assert re.search(r"building the engine… failed after \d+\.\d s", capsys.readouterr().err)


def test_quiet_ranks_say_nothing(capsys):
    console.set_quiet(True)
    try:
        console.say("hello")
        with console.stage("loading"):
            pass
    finally:
        console.set_quiet(False)
    assert capsys.readouterr().err == ""


def test_native_output_is_captured_and_logged_at_debug(caplog, capfd):
    with caplog.at_level(logging.DEBUG, logger="ppokit"), captured_native_output("a probe"):
        subprocess.run(["sh", "-c", "echo '/usr/bin/ld: cannot find -laio' >&2; echo built"], check=True)
        print("python print")
    assert "laio" not in capfd.readouterr().err
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "a probe wrote:" in logged and "/usr/bin/ld: cannot find -laio" in logged and "built" in logged


def test_memory_metrics_report_this_process():
    memory = console.memory_metrics()
    assert 0.01 < memory["memory/rss_gb"] < 1024  # a Python process with torch loaded holds tens of MB at least


def test_summary_line_shows_throughput_and_memory():
    line = format_summary(3, {"reward/mean": 0.5, "timing/step_s": 2.0, "throughput/tokens_per_s": 310.4,
                              "memory/rss_gb": 1.414}, total=4)
    assert line == "step 3/4 | reward 0.5 | 2.0s/step | 310 tok/s | mem 1.41 GB"


def test_run_summary_names_the_steps_it_compares(tmp_path):
    history = [{"step": i + 1, "reward/mean": 0.0 if i < 10 else 1.0, "timing/step_s": 3.0 + (i % 3)}
               for i in range(25)]
    history[9]["eval/accuracy"] = 0.867
    history[-1]["eval/accuracy"] = 1.0
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "checkpoint-10").mkdir()
    (tmp_path / "checkpoint-20").mkdir()
    text = console.run_summary(history, tmp_path, 175.0, logging_dir="vdl_log", visualdl=True,
                               eval_data="data/arithmetic/test.jsonl")
    lines = text.splitlines()
    # the wall time is all of train(); the step time is the median of 3, 4, 5, 3, 4, 5, ... (9 threes) = 4
    assert lines[0] == "done: 25 steps in 2 min 55 s, 4.0 s per training step (median)"
    assert lines[1] == "reward 0 (mean of steps 1–10) → 1 (steps 16–25)"  # hand-computed windows
    assert lines[2] == "eval accuracy 0.87 at step 10 → 1.00 at step 25"
    assert "checkpoint-10, checkpoint-20" in text and f"final model: {tmp_path}/" in text
    visualdl, python = console.command_path("visualdl"), console.command_path("python")
    assert lines[-3:] == [f"    {visualdl} --logdir vdl_log --component_tabs scalar text hyper_parameters",
                          f"    {python} -m ppokit.tracking.report {tmp_path}",
                          f"    {python} -m ppokit.eval --model {tmp_path} --data data/arithmetic/test.jsonl --n 4"]


def test_run_summary_of_one_eval_and_of_two_steps(tmp_path):
    history = [{"step": 1, "reward/mean": 0.25}, {"step": 2, "reward/mean": 0.5, "eval/accuracy": 0.533}]
    lines = console.run_summary(history, tmp_path, 9.0).splitlines()
    assert lines[:3] == ["done: 2 steps in 9 s", "reward 0.25 at step 1 → 0.5 at step 2",
                         "eval accuracy 0.533 at step 2"]


@pytest.fixture(scope="module")
def tiny_config(tiny_model_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("console-run")
    rows = get("arithmetic").generate(12, seed=3)
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = dict(json.loads((REPO / "config" / "grpo_argument.json").read_text()),
                  actor_model_name_or_path=tiny_model_dir, train_datasets=str(root / "train.jsonl"),
                  eval_datasets=None, do_eval=False, evaluation_strategy="no", global_batch_size=2, rollout_n=2, global_mini_batch_size=2,
                  max_dec_len=6, max_steps=2, save_steps=1, output_dir=str(root / "out"),
                  logging_dir=str(root / "vdl"))
    path = root / "config.json"
    path.write_text(json.dumps(config))
    return path


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env_keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR")
    env = {k: v for k, v in os.environ.items() if k not in env_keys}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


STEP_LINE = re.compile(r"^ppokit: step (\d)/2 \| reward \S+ \| len \S+ .*s/step \|( \+ save \d+\.\ds \|)? \d+ tok/s \| "
                       r"mem \d+\.\d\d GB$")


def test_cli_console_from_start_to_end(tiny_config):
    done = run([sys.executable, str(REPO / "run_ppo.py"), str(tiny_config)], tiny_config.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr
    for noise in ("-laio", "collect2", "Setting accelerator", "DeepSpeed config", "use_fusemt", "built successfully"):
        assert noise not in err + done.stdout, noise  # DeepSpeed's probes and config are not the user's business
    assert "\r" not in err  # stderr is a pipe: plain lines, no bar frames
    lines = err.splitlines()
    stages = [line for line in lines if line.startswith("ppokit: ") and "…" in line]  # each stage once, timed
    assert all(re.fullmatch(r"ppokit: .+… \d+\.\d s", line) for line in stages), stages
    model = json.loads(tiny_config.read_text())["actor_model_name_or_path"]
    assert [s.split("…")[0] for s in stages] == [
        "ppokit: starting the process group (DeepSpeed)", f"ppokit: loading {model}",
        "ppokit: reading the prompts", "ppokit: building the DeepSpeed engine (ZeRO stage 0, cpu)"]
    steps = [line for line in lines if "ppokit: step" in line]
    assert len(steps) == 2 and all(STEP_LINE.match(line) for line in steps), steps  # never glued to the bar
    assert "+ save " in steps[0] and "+ save " not in steps[1], steps  # a checkpoint after step 1 is named with it
    # after the last step nothing is silent: the final save says what it does before it starts, and how long after
    after = lines[lines.index(steps[-1]) + 1:]
    assert after[0] == f"ppokit: saving the final model to {tiny_config.parent / 'out'} ..." or \
        after[0].startswith("ppokit: saving the final model to "), after[:3]
    assert any(re.fullmatch(r"ppokit: saved in \d+\.\d s", line) for line in after[1:3]), after[:3]
    summary = err[err.index("ppokit: done: 2 steps in"):].splitlines()
    assert re.fullmatch(r"ppokit: done: 2 steps in \d+ s, \d+\.\d s per training step \(median\); outside the "
                        r"steps: final save \d+\.\d s", summary[0]), summary[0]
    rows = [json.loads(line) for line in (tiny_config.parent / "out" / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    assert summary[1] == f"ppokit: reward {rewards[0]:.3g} at step 1 → {rewards[1]:.3g} at step 2"  # the file's
    assert any(line.startswith("ppokit: checkpoints: checkpoint-2 in ") for line in summary)  # save_total_limit: 1
    report = summary[-2:][0].removeprefix("ppokit:").strip()
    assert " -m ppokit.tracking.report " in report
    # the command runs as printed, from where the run was started, with a PATH that lacks this venv
    env = {**os.environ, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    made = subprocess.run(shlex.split(report), cwd=tiny_config.parent, env=env, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    assert (tiny_config.parent / "out" / "report.html").is_file()
    assert all(r["memory/rss_gb"] > 0 for r in rows if "reward/mean" in r)  # memory is logged, not only shown


def test_plain_python_train_with_disable_tqdm_prints_the_step_lines_and_the_summary(tiny_config):
    """disable_tqdm (set by many PaddleNLP files) is about the bar: the step lines and the summary stay."""
    code = ("from ppokit import Session\n"
            f"Session.from_json({str(tiny_config)!r}, output_dir='out2', save_strategy='no', disable_tqdm=True)"
            ".train()\n")
    done = run([sys.executable, "-c", code], tiny_config.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    steps = [line for line in lines if "ppokit: step" in line]
    assert len(steps) == 2 and all(STEP_LINE.match(line) for line in steps), done.stderr[-2000:]
    assert "ppokit: done: 2 steps in" in done.stderr


def test_next_commands_name_the_venv_that_is_not_on_the_path(tmp_path, monkeypatch):
    """After `make run` the tools live in .venv/bin, which the shell does not search: the path is printed."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "visualdl"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(console.sys, "executable", str(bin_dir / "python"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert console.command_path("visualdl") == ".venv/bin/visualdl"
    assert console.command_path("python") == ".venv/bin/python"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")  # an activated venv: the plain names run the same
    assert console.command_path("visualdl") == "visualdl" and console.command_path("python") == "python"
    monkeypatch.chdir("/")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert console.command_path("visualdl") == str(bin_dir / "visualdl")


def test_the_bar_leaves_evaluation_and_save_out_of_its_rate(monkeypatch):
    """The bar's s/step and ETA are the steps' own: seconds spent evaluating or saving between steps are excluded
    (its elapsed time is what a person reads beside the rate)."""
    import ppokit.tracking.progress as progress

    monkeypatch.setattr(progress, "redraws", lambda out: True)
    bar = progress.ConsoleProgress(total=4)
    assert bar._bar is not None
    bar._bar.start_t -= 100.0  # as if 100 s of evaluation had passed since the bar started
    bar._bar.last_print_t -= 100.0
    bar.exclude(100.0)
    bar.update(1, {"reward/mean": 0.5})
    assert bar._bar.format_dict["elapsed"] < 50 and "100" not in str(bar._bar)
    bar.close()


def terminal(written: str) -> list[str]:
    """The lines a terminal shows for `written`: a carriage return goes back to the line's start, ESC[K wipes it."""
    lines = []
    for raw in written.split("\n"):
        shown = ""
        for part in raw.split("\r"):
            part = part.replace("\033[K", "")
            shown = part + shown[len(part):]
        lines.append(shown)
    return [line for line in lines if line]


def test_a_note_during_a_stage_gets_its_own_line_and_the_stage_shows_once(monkeypatch):
    """'reading the prompts…ppokit: arithmetic: only 125 distinct prompts' glued, then the stage again: no more."""
    import io

    out = io.StringIO()
    monkeypatch.setattr(console, "stream", lambda: out)
    monkeypatch.setattr(console, "redraws", lambda stream: True)
    monkeypatch.setattr(console, "_in_notebook", lambda: False)
    with console.stage("reading the prompts"):
        console.say("arithmetic: only 125 distinct prompts")
    shown = terminal(out.getvalue())
    assert shown[0] == "ppokit: arithmetic: only 125 distinct prompts"
    assert re.fullmatch(r"ppokit: reading the prompts… \d+\.\d s", shown[1]) and len(shown) == 2, shown


def test_a_log_line_during_a_stage_gets_its_own_line(monkeypatch):
    import io

    from ppokit.args.cli import _BarSafeHandler

    out = io.StringIO()
    monkeypatch.setattr(console, "stream", lambda: out)
    monkeypatch.setattr(console, "redraws", lambda stream: True)
    monkeypatch.setattr(console, "_in_notebook", lambda: False)
    handler = _BarSafeHandler(out)
    handler.setFormatter(logging.Formatter("ppokit: %(message)s"))
    log = logging.getLogger("ppokit.test-live-line")
    log.addHandler(handler)
    try:
        with console.stage("reading the prompts"):
            log.warning("arithmetic: only 125 distinct prompts")
    finally:
        log.removeHandler(handler)
    shown = terminal(out.getvalue())
    assert shown[0] == "ppokit: arithmetic: only 125 distinct prompts" and len(shown) == 2, shown


def test_what_step_returns_reads_as_the_step_line_with_rounded_values():
    from ppokit.tracking.step_metrics import StepMetrics

    metrics = StepMetrics({"reward/mean": 0.625, "reward/std": 0.3125, "actor/lr": 3e-05,
                           "actor/pg_loss": -0.012345678, "timing/step_s": 4.2}, step=3)
    shown = repr(metrics).splitlines()
    assert shown[0] == "step 3 | reward 0.625±0.312 | 4.2s/step"
    assert shown[1] == "{'reward/mean': 0.625, 'reward/std': 0.3125, 'actor/lr': 3e-05, 'actor/pg_loss': -0.01235, " \
                       "'timing/step_s': 4.2}"
    assert metrics == {"reward/mean": 0.625, "reward/std": 0.3125, "actor/lr": 3e-05, "actor/pg_loss": -0.012345678,
                       "timing/step_s": 4.2}  # the values themselves are not rounded


def test_a_session_outside_run_ppo_says_its_warnings_as_ppokit_lines(tiny_config):
    """A script or a notebook builds a Session without run_ppo.py's log set-up: its notes still read "ppokit: ...",
    and the staleness warning counts in the singular."""
    code = ("from ppokit import Session\n"
            f"Session.from_json({str(tiny_config)!r}, output_dir='out3', staleness_threshold=1, rollout_is='off')\n")
    done = run([sys.executable, "-c", code], tiny_config.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ppokit: staleness_threshold=1 trains on batches up to 1 policy version old without importance " \
           "correction" in done.stderr
