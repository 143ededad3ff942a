"""Tracker → VisualDL: scalars, text and hparams read back with visualdl.LogReader; resume; other backends."""

from __future__ import annotations

import sys
import types

import pytest
from tracking_helpers import jsonl_rows, read_vdl, vdl_files, vdl_scalars

from ppokit.tracking import Tracker


def test_scalars_read_back_with_logreader(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step in (1, 2, 3):
            t.log(step, {"reward/mean": step * 0.25, "actor/pg_loss": -step, "timing/rollout_s": 2.0})
        t.log(4, {"reward/mean": float("nan"), "actor/pg_loss": 0.5})
        path = t.visualdl_file
    files = vdl_files(vdl)
    assert [str(f) for f in files] == [path]
    assert vdl_scalars(files[0], "reward/mean") == [(1, 0.25), (2, 0.5), (3, 0.75)]  # NaN left out
    assert vdl_scalars(files[0], "actor/pg_loss") == [(1, -1.0), (2, -2.0), (3, -3.0), (4, 0.5)]
    assert vdl_scalars(files[0], "timing/rollout_s") == [(1, 2.0), (2, 2.0), (3, 2.0)]


def test_scalars_are_readable_before_close(dirs):
    out, vdl = dirs
    t = Tracker(out, logging_dir=vdl)
    t.log(1, {"reward/mean": 0.5})
    assert vdl_scalars(vdl_files(vdl)[0], "reward/mean") == [(1, 0.5)]
    t.close()


def test_samples_become_visualdl_text(dirs):
    out, vdl = dirs
    chatml = "<|im_start|>system\nYou are SmolLM<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    rows = [{"question": f"question {i}?", "prompt": chatml.format(f"question {i}?"), "response": f"answer\n{i}",
             "reward": i / 10, "reward/rule": i / 10} for i in range(6)]
    with Tracker(out, logging_dir=vdl) as t:
        t.log_samples(7, rows)
    reader = read_vdl(vdl_files(vdl)[0])
    texts = [reader.get_data("text", f"samples/{i}") for i in (1, 2, 3, 4)]  # one tag per sample, 4 shown
    assert [[r.id for r in records] for records in texts] == [[7]] * 4
    fourth = texts[3][0].text.encoded_text_string  # VisualDL folds newlines: one line, facts first
    assert fourth == "reward 0.3 · reward/rule 0.3 · Q: question 3? · A: answer 3"
    assert "samples/5" not in reader.tags().get("text", [])


def test_hparams_keep_only_scalar_entries(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log_hparams(
            {"learning_rate": 1e-6, "max_steps": 20, "rl_algorithm": "grpo", "report_to": ["visualdl"]}
        )
    (record,) = read_vdl(vdl_files(vdl)[0]).get_data("hyper_parameters", "hparam")
    infos = {h.name: h for h in record.hparam.hparamInfos}
    assert set(infos) == {"learning_rate", "max_steps", "rl_algorithm"}
    assert infos["learning_rate"].float_value == pytest.approx(1e-6)
    assert infos["max_steps"].int_value == 20 and infos["rl_algorithm"].string_value == "grpo"
    assert "train/reward/mean" in [m.name for m in record.hparam.metricInfos]


def test_resume_carries_visualdl_history_into_the_new_file(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step in range(1, 6):
            t.log(step, {"reward/mean": float(step)})
        t.log_samples(2, [{"prompt": "p", "response": "early", "reward": 1.0}])
        t.log_samples(5, [{"prompt": "p", "response": "late", "reward": 1.0}])
    with Tracker(out, logging_dir=vdl, resume_step=3) as t:
        t.log(4, {"reward/mean": 40.0})
        new_file = t.visualdl_file
    files = vdl_files(vdl)
    assert len(files) == 2 and str(files[-1]) == new_file  # VisualDL shows the newest file
    assert vdl_scalars(files[-1], "reward/mean") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    texts = read_vdl(files[-1]).get_data("text", "samples/1")
    assert [r.id for r in texts] == [2] and "early" in texts[0].text.encoded_text_string
    # what `visualdl --logdir` serves: the newest file of the run directory
    from visualdl import LogReader

    server_view = LogReader(logdir=str(vdl))
    assert server_view.logs() == {str(vdl): files[-1].name}
    served = server_view.get_log_data("scalar", str(vdl), "train%reward%mean")  # VisualDL's internal tag form
    assert [(step, value) for step, _, _, value in served] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_resume_after_a_crash_mid_record_keeps_the_intact_history(dirs, capsys):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step in range(1, 4):
            t.log(step, {"reward/mean": float(step)})
        old = t.visualdl_file
    with open(old, "r+b") as f:  # cut the record file inside its last record (step 3)
        f.truncate(len(f.read()) - 3)
    with Tracker(out, logging_dir=vdl, resume_step=3) as t:
        t.log(4, {"reward/mean": 40.0})
        new_file = t.visualdl_file
    assert str(vdl_files(vdl)[-1]) == new_file
    assert vdl_scalars(vdl_files(vdl)[-1], "reward/mean") == [(1, 1.0), (2, 2.0), (4, 40.0)]
    assert [r["step"] for r in jsonl_rows(out / "metrics.jsonl")] == [1, 2, 3, 4]
    assert capsys.readouterr().err == ""


def test_tensorboard_missing_is_a_one_line_note(dirs, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were absent
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl, report_to=["visualdl", "tensorboard"]) as t:
        t.log(1, {"x": 1.0})
        assert [b.name for b in t.backends] == ["visualdl"]
    err = capsys.readouterr().err
    assert "tensorboard" in err and "not installed" in err and err.count("\n") == 1


def test_tensorboard_writer_receives_scalars_and_purges_on_resume(dirs, monkeypatch):
    pytest.importorskip("torch")
    calls = []

    class FakeWriter:
        def __init__(self, log_dir, purge_step=None):
            calls.append(("init", log_dir, purge_step))

        def add_scalar(self, tag, value, step):
            calls.append(("scalar", tag, value, step))

        def add_text(self, tag, text, step):
            calls.append(("text", tag, step))

        def flush(self):
            pass

        def close(self):
            calls.append(("close",))

    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = FakeWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl, report_to=["tensorboard"], resume_step=4) as t:
        t.log(5, {"reward/mean": 0.5, "bad": float("nan")})
    assert calls == [("init", str(vdl), 5), ("scalar", "reward/mean", 0.5, 5), ("close",)]


def test_wandb_missing_is_a_note_and_present_is_used(dirs, capsys, monkeypatch):
    out, vdl = dirs
    monkeypatch.setitem(sys.modules, "wandb", None)
    with Tracker(out, logging_dir=vdl, report_to=["wandb"]) as t:
        t.log(1, {"x": 1.0})
    assert "wandb" in capsys.readouterr().err

    logged = []
    run = types.SimpleNamespace(
        log=lambda data, step: logged.append((step, data)),
        config=types.SimpleNamespace(update=lambda d, allow_val_change: logged.append(("config", d))),
        finish=lambda: logged.append("finish"),
    )
    fake = types.ModuleType("wandb")
    fake.init = lambda **kwargs: logged.append(("init", kwargs["name"])) or run
    fake.Html = lambda text: ("html", text)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with Tracker(out, logging_dir=vdl, report_to=["wandb"], run_name="r1") as t:
        t.log_hparams({"lr": 0.1, "nested": {"a": 1}})
        t.log(2, {"x": 2.0})
    assert logged == [("init", "r1"), ("config", {"lr": 0.1}), (2, {"x": 2.0}), "finish"]
