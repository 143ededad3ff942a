"""Tracker: what lands in metrics.jsonl, samples.jsonl and args.json, read back from disk."""

from __future__ import annotations

import json
import math

import pytest
from tracking_helpers import jsonl_rows

from ppokit.tracking import Tracker, read_jsonl, read_metrics, resolve_report_to


def test_log_appends_one_row_per_call_with_step_and_time(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log(1, {"reward/mean": 0.5, "actor/pg_loss": -0.1})
        t.log(2, {"reward/mean": 0.75, "timing/rollout_s": 1.5})
    rows = jsonl_rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["reward/mean"] == 0.5 and rows[0]["actor/pg_loss"] == -0.1
    assert rows[1]["timing/rollout_s"] == 1.5 and "actor/pg_loss" not in rows[1]
    assert 0 <= rows[0]["time"] <= rows[1]["time"]
    assert list(rows[0])[:2] == ["step", "time"]
    assert read_metrics(out) == rows


def test_rows_are_on_disk_before_close(dirs):
    out, vdl = dirs
    t = Tracker(out, logging_dir=vdl)
    t.log(3, {"reward/mean": 1.0})
    assert jsonl_rows(out / "metrics.jsonl")[0]["reward/mean"] == 1.0  # flushed per row
    t.close()


def test_non_finite_values_become_null_and_numbers_are_converted(dirs):
    out, vdl = dirs
    torch = pytest.importorskip("torch")
    with Tracker(out, logging_dir=vdl) as t:
        t.log(1, {"a": float("nan"), "b": float("inf"), "c": torch.tensor(0.25), "d": True, "e": 7})
    text = (out / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    row = json.loads(text)
    assert row["a"] is None and row["b"] is None
    assert row["c"] == 0.25 and row["d"] == 1 and row["e"] == 7


@pytest.mark.parametrize(
    "metrics, error, words",
    [
        ({"reward/mean": "high"}, TypeError, "single numbers"),
        ({"step": 1.0}, ValueError, "reserved"),
        ({"acc%": 1.0}, ValueError, "VisualDL cannot store"),
    ],
)
def test_bad_metrics_raise_sentences(dirs, metrics, error, words):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t, pytest.raises(error, match=words):
        t.log(1, metrics)


def test_step_must_be_whole(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t, pytest.raises(TypeError, match="whole number"):
        t.log(1.5, {"x": 1.0})


def test_log_samples_writes_rows_with_step(dirs):
    out, vdl = dirs
    rows = [
        {"prompt": "2+2=", "response": "4", "reward": 1.0, "advantage": 0.5, "task": "arithmetic"},
        {"prompt": "3+3=", "response": "7", "reward": 0.0, "rewards": {"exact": 0.0, "format": 1.0}},
    ]
    with Tracker(out, logging_dir=vdl) as t:
        t.log_samples(4, rows)
    written = jsonl_rows(out / "samples.jsonl")
    assert written == [{"step": 4, **rows[0]}, {"step": 4, **rows[1]}]


def test_log_hparams_writes_args_json(dirs):
    out, vdl = dirs
    hparams = {"learning_rate": 1e-6, "rl_algorithm": "grpo", "report_to": ["visualdl"], "bad": float("nan")}
    with Tracker(out, logging_dir=vdl) as t:
        t.log_hparams(hparams)
    args = json.loads((out / "args.json").read_text())
    assert args == {"learning_rate": 1e-6, "rl_algorithm": "grpo", "report_to": ["visualdl"], "bad": None}


def test_log_hparams_accepts_pydantic_models(dirs):
    pydantic = pytest.importorskip("pydantic")

    class Args(pydantic.BaseModel):
        max_steps: int = 20
        temperature: float = 0.7

    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log_hparams(Args())
    assert json.loads((out / "args.json").read_text()) == {"max_steps": 20, "temperature": 0.7}


def test_disabled_tracker_creates_nothing(tmp_path):
    out, vdl = tmp_path / "out", tmp_path / "vdl"
    with Tracker(out, logging_dir=vdl, enabled=False, report_to=["visualdl", "tensorboard"]) as t:
        t.log(1, {"reward/mean": 1.0})
        t.log_samples(1, [{"prompt": "p", "response": "r", "reward": 1.0}])
        t.log_hparams({"a": 1})
        assert t.truncate_after(0) == 0
    assert list(tmp_path.iterdir()) == []


def test_resume_drops_rows_after_step_and_continues_time(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step in range(1, 6):
            t.log(step, {"reward/mean": step / 10})
            t.log_samples(step, [{"prompt": f"p{step}", "response": "r", "reward": 0.0}])
    last_time_kept = jsonl_rows(out / "metrics.jsonl")[2]["time"]
    # an interrupted write left half a row at the end
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"step": 6, "reward/me')

    with Tracker(out, logging_dir=vdl, resume_step=3) as t:
        t.log(4, {"reward/mean": 0.99})
        t.log_samples(4, [{"prompt": "new", "response": "r", "reward": 1.0}])

    rows = jsonl_rows(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["reward/mean"] == 0.99
    assert rows[-1]["time"] >= last_time_kept
    samples = jsonl_rows(out / "samples.jsonl")
    assert [(s["step"], s["prompt"]) for s in samples] == [(1, "p1"), (2, "p2"), (3, "p3"), (4, "new")]


def test_truncate_after_reports_rows_dropped(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step in range(1, 5):
            t.log(step, {"x": step})
        assert t.truncate_after(2) == 2
        t.log(3, {"x": 30})
    assert [(r["step"], r["x"]) for r in jsonl_rows(out / "metrics.jsonl")] == [(1, 1), (2, 2), (3, 30)]


def test_fresh_run_refuses_earlier_files_and_replaces_them_when_asked(dirs, capsys):
    from ppokit.tracking.tracker import EarlierRecordsError

    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log(1, {"x": 1.0})
        t.log_samples(1, [{"prompt": "p", "response": "r", "reward": 0.0}])
    with pytest.raises(EarlierRecordsError, match="metrics.jsonl and samples.jsonl of an earlier run.*resume_step"):
        Tracker(out, logging_dir=vdl)
    assert [r["x"] for r in jsonl_rows(out / "metrics.jsonl")] == [1.0]  # refused: nothing replaced
    with Tracker(out, logging_dir=vdl, replace=True) as t:
        t.log(1, {"x": 2.0})
    assert "replacing" in capsys.readouterr().err
    assert [r["x"] for r in jsonl_rows(out / "metrics.jsonl")] == [2.0]
    assert not (out / "samples.jsonl").exists()


def test_closed_tracker_says_how_to_continue(dirs):
    out, vdl = dirs
    t = Tracker(out, logging_dir=vdl)
    t.close()
    t.close()  # twice is fine
    with pytest.raises(RuntimeError, match="resume_step"):
        t.log(1, {"x": 1.0})


def test_read_jsonl_skips_truncated_last_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n{"step": 3, "x"')
    contents = read_jsonl(path)
    assert [r["step"] for r in contents.rows] == [1, 2]
    assert contents.bad_lines == [2, 4] and contents.truncated_last_line
    notes = " ".join(contents.problems("m.jsonl"))
    assert "line 4" in notes and "interrupted" in notes and "2" in notes


def test_report_to_resolution():
    assert resolve_report_to(None) == ["visualdl"]
    assert resolve_report_to("none") == []
    assert resolve_report_to(["VisualDL", "visualdl"]) == ["visualdl"]
    assert "visualdl" in resolve_report_to(["all"])
    with pytest.raises(ValueError, match="'mlflow'.*visualdl, tensorboard, wandb"):
        resolve_report_to(["mlflow"])


def test_report_to_empty_still_writes_jsonl(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl, report_to=[]) as t:
        t.log(1, {"x": math.pi})
    assert jsonl_rows(out / "metrics.jsonl")[0]["x"] == math.pi
    assert not vdl.exists()


def test_the_run_clock_starts_at_start_clock_and_its_end_is_recorded(dirs, monkeypatch):
    from ppokit.tracking import tracker

    now = [100.0]  # a fake monotonic clock, moved by hand
    monkeypatch.setattr(tracker.time, "monotonic", lambda: now[0])
    out, vdl = dirs
    t = Tracker(out, logging_dir=vdl)  # opened early (set-up), which does not count
    now[0] = 130.0
    t.start_clock()  # train() starts
    now[0] = 140.0
    t.log(1, {"reward/mean": 0.5})
    t.start_clock()  # too late (a step was logged): the clock keeps running
    now[0] = 150.0
    t.log(2, {"reward/mean": 0.6})
    now[0] = 160.0
    t.close()
    rows = jsonl_rows(out / "metrics.jsonl")
    state = json.loads((out / "tracking_state.json").read_text())
    assert [r["time"] for r in rows] == [10.0, 20.0] and state["wall_s"] == 30.0
    assert state["started_at"].endswith("+00:00")
    now[0] = 500.0
    with Tracker(out, logging_dir=vdl, resume_step=2) as again:  # a resume keeps the run's start
        again.start_clock()  # continues from the last row's 20 s, not from 0
        now[0] = 505.0
        again.log(3, {"reward/mean": 0.7})
    assert jsonl_rows(out / "metrics.jsonl")[-1]["time"] == 25.0
    assert json.loads((out / "tracking_state.json").read_text())["started_at"] == state["started_at"]


def test_a_pydantic_model_records_its_defaults_and_the_keys_without_effect(dirs):
    pydantic = pytest.importorskip("pydantic")

    class Args(pydantic.BaseModel):
        learning_rate: float = pydantic.Field(1e-6, description="Actor learning rate.")
        stage: str = pydantic.Field("PPO", description="Training-stage label (informational only).")
        tags: list = pydantic.Field(default_factory=list, description="PaddleNLP tags; no effect in ppokit.")

    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log_hparams(Args(learning_rate=2e-5), plan={"prompts_per_step": 8, "rollout_n": 4})
    info = json.loads((out / "args_info.json").read_text())
    assert info == {"defaults": {"learning_rate": 1e-6, "stage": "PPO", "tags": []}, "no_effect": ["stage", "tags"],
                    "plan": {"prompts_per_step": 8, "rollout_n": 4}}
    assert json.loads((out / "args.json").read_text()) == {"learning_rate": 2e-5, "stage": "PPO", "tags": []}
