"""Tracker → VisualDL: scalars, text and hparams read back with visualdl.LogReader; resume; other backends."""

from __future__ import annotations

import json
import sys
import types

import pytest
from tracking_helpers import jsonl_rows, read_vdl, vdl_files, vdl_scalars, vdl_tags

from ppokit.tracking import Tracker
from ppokit.tracking.vdl import left_out


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
    texts = [reader.get_data("text", f"samples/{i} · from step 7") for i in (1, 2, 3, 4)]  # a tag per sample
    assert [[r.id for r in records] for records in texts] == [[7]] * 4
    fourth = texts[3][0].text.encoded_text_string  # VisualDL folds newlines: one line, facts first
    assert fourth == "reward 0.3 · reward/rule 0.3 · Q: question 3? · A: answer 3"
    assert len(vdl_tags(vdl_files(vdl)[0], "text")) == 4


def test_every_logged_step_keeps_its_samples_in_tags_of_ten_steps(dirs):
    """The VisualDL server keeps 10 texts per tag: 25 logged steps fill three tags per sample, none dropped."""
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step in range(2, 52, 2):  # 25 logged steps
            t.log(step, {"reward/mean": 1.0})
            t.log_samples(step, [{"prompt": "p", "response": f"answer at {step}", "reward": 1.0}])
    reader = read_vdl(vdl_files(vdl)[0])
    tags = vdl_tags(vdl_files(vdl)[0], "text")
    assert tags == ["samples/1 · from step 2", "samples/1 · from step 22", "samples/1 · from step 42"]
    steps = [[r.id for r in reader.get_data("text", tag)] for tag in tags]
    assert steps == [list(range(2, 22, 2)), list(range(22, 42, 2)), list(range(42, 52, 2))]
    assert all(len(s) <= 10 for s in steps)


def test_hparams_keep_only_scalar_entries(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log_hparams(
            {"learning_rate": 1e-6, "max_steps": 20, "rl_algorithm": "grpo", "report_to": ["visualdl"]}
        )
    (record,) = read_vdl(vdl_files(vdl)[0]).get_data("hyper_parameters", "hparam")
    infos = {h.name: h for h in record.hparam.hparamInfos}
    assert set(infos) == {"run", "learning_rate", "max_steps", "rl_algorithm"}  # run: the trial's short name
    assert infos["run"].string_value == "out"
    assert infos["learning_rate"].float_value == pytest.approx(1e-6)
    assert infos["max_steps"].int_value == 20 and infos["rl_algorithm"].string_value == "grpo"
    assert [m.name for m in record.hparam.metricInfos] == []  # no metric was logged: none is declared


def test_scalars_come_before_the_hparams_so_visualdl_opens_on_the_charts(dirs):
    """VisualDL opens on the first component of the record file (after its meta data)."""
    from visualdl.proto import record_pb2
    from visualdl.reader.record_reader import RecordReader

    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log_hparams({"learning_rate": 1e-6})  # the Session logs its arguments first
        t.log(1, {"reward/mean": 0.5, "actor/kl": 0.1})
        t.log(2, {"reward/mean": 0.6})
    kinds = []
    for raw in RecordReader(filepath=str(vdl_files(vdl)[0])).get_all():
        record = record_pb2.Record()
        record.ParseFromString(raw)
        kinds += [(v.WhichOneof("one_value"), v.tag) for v in record.values]
    kinds = [k for k in kinds if k[0] != "meta_data"]
    assert kinds[:3] == [("value", "0 reward and eval/reward/mean"), ("value", "actor/kl"), ("hparam", "hparam")]


def test_hparams_of_a_run_without_scalars_are_written_at_close(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log_hparams({"learning_rate": 1e-6})
    assert read_vdl(vdl_files(vdl)[0]).get_data("hyper_parameters", "hparam")


def test_reward_and_eval_open_first_and_copies_and_flat_lines_are_not_written(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step in (1, 2, 3):
            t.log(step, {"actor/kl": 0.1, "critic/value_loss": 1.0, "timing/step_s": 2.0, "kl/beta": 0.1,
                         "reward/mean": step / 4, "reward/rule": step / 4, "reward/raw_mean": step / 4,
                         "reward/std": 0.1, "memory/rss_gb": 1.0, "eval/accuracy": 0.5, "eval/pass@1": 0.5,
                         "eval/pass@4": 0.75, "eval/mean@4": 0.5, "eval/prompts": 30.0, "actor/clipfrac": 0.0,
                         "actor/approx_kl": 0.0, "reward/skipped_groups": 0.0, "timing/ref_s": 2e-6,
                         "advantages/mean": 0.01 * step, "returns/mean": 0.01 * step, "reward/max": 1.0,
                         "reward/min": 0.0, "cpu/update_threads": 2.0, "response_length/max": 32.0})
    tags = vdl_tags(vdl_files(vdl)[0], "scalar")
    # VisualDL's scalar page: groups by the text before the first "/", sorted case-insensitively, the first opened
    groups = sorted(dict.fromkeys(t.split("/")[0] for t in tags), key=str.upper)
    assert groups == ["0 reward and eval", "actor", "advantages", "critic", "kl", "memory", "timing"]
    first = [t.split("/", 1)[1] for t in tags if t.startswith(groups[0] + "/")]
    assert first[:2] == ["reward/mean", "reward/std"]  # no copies, no flat 0, no constant max/min
    assert sorted(first[2:]) == ["eval/accuracy", "eval/mean@4", "eval/pass@4"]
    assert [t for t in tags if t.startswith(("actor", "timing", "returns", "cpu", "response_length"))] == \
        ["actor/kl", "timing/step_s"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    said = left_out(rows)  # what the report says once
    assert sorted(said) == ["actor/approx_kl", "actor/clipfrac", "cpu/update_threads", "eval/pass@1", "eval/prompts",
                            "response_length/max", "returns/mean", "reward/max", "reward/min", "reward/raw_mean",
                            "reward/rule", "reward/skipped_groups", "timing/ref_s"]
    assert said["reward/max"].startswith("constant 1: the same at every step")
    assert said["returns/mean"] == "the same as advantages/mean at every step"
    assert said["eval/prompts"].startswith("constant 30: the size of the eval set")
    assert said["actor/clipfrac"].startswith("constant 0: one update per rollout step")
    assert "the phase did not run" in said["timing/ref_s"]


def test_a_flat_series_that_moves_is_written_with_its_whole_history(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step, clip in ((1, 0.0), (2, 0.0), (3, 0.25)):
            t.log(step, {"reward/mean": 0.5, "actor/clipfrac": clip})
    assert vdl_scalars(vdl_files(vdl)[0], "actor/clipfrac") == [(1, 0.0), (2, 0.0), (3, 0.25)]


def test_the_hparams_table_starts_with_what_the_user_changed_and_declares_logged_metrics(dirs):
    from ppokit.args import load_arguments

    out, vdl = dirs
    args = load_arguments(None, overrides=dict(actor_model_name_or_path="m", rollout_n=2, learning_rate=3e-6, rl_algorithm="grpo", per_device_train_batch_size=2,
                                               do_eval=True, max_steps=2, output_dir=str(out)))
    with Tracker(out, logging_dir=vdl) as t:
        t.log_hparams(args)
        t.log(1, {"reward/mean": 0.5, "response_length/mean": 9.0})
    (record,) = read_vdl(vdl_files(vdl)[0]).get_data("hyper_parameters", "hparam")
    names = [h.name for h in record.hparam.hparamInfos]
    assert names[:7] == ["run", "actor_model_name_or_path", "rl_algorithm", "learning_rate", "rollout_n", "max_steps",
                         "do_eval"]  # the run's short name, then what was changed, ranked
    assert "temperature" in names[7:]  # unchanged, but a key runs are compared by
    assert "output_dir" not in names and len(names) < 30
    assert "kl_coeff" not in names and "per_device_value_batch_size" not in names  # GRPO: no KL reward, no critic
    metrics = [m.name for m in record.hparam.metricInfos]
    assert metrics == ["0 reward and eval/reward/mean", "0 reward and eval/eval/accuracy", "response_length/mean"]


def test_two_reward_functions_are_written_even_while_they_equal_the_mean(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        t.log(1, {"reward/mean": 0.0, "reward/rule": 0.0, "reward/format": 0.0})
    tags = vdl_tags(vdl_files(vdl)[0], "scalar")
    assert sorted(tags) == ["0 reward and eval/reward/format", "0 reward and eval/reward/mean",
                            "0 reward and eval/reward/rule"]


def test_a_copy_that_starts_to_differ_is_written_with_its_whole_history(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step, clipped in ((1, 0.5), (2, 0.75), (3, 1.0)):
            t.log(step, {"reward/mean": min(clipped, 0.9), "reward/raw_mean": clipped})
    path = vdl_files(vdl)[0]
    assert vdl_scalars(path, "reward/raw_mean") == [(1, 0.5), (2, 0.75), (3, 1.0)]
    assert vdl_scalars(path, "reward/mean") == [(1, 0.5), (2, 0.75), (3, pytest.approx(0.9))]


def test_each_run_writes_its_own_folder_named_after_the_run(tmp_path):
    from visualdl import LogReader

    vdl = tmp_path / "vdl_log"
    for out, name in ((tmp_path / "grpo", None), (tmp_path / "grpo", None), (tmp_path / "x", "my/run")):
        with Tracker(out, logging_dir=vdl, run_name=name, replace=True) as t:  # the second grpo replaces its files
            t.log(1, {"reward/mean": 1.0})
    folders = sorted(str(p.parent.relative_to(vdl)) for p in vdl_files(vdl))
    assert folders == ["grpo", "grpo-2", "my/run"]  # a second run of a name does not overwrite the first
    assert sorted(LogReader(logdir=str(vdl)).logs()) == sorted(str(vdl / f) for f in folders)  # three runs
    with Tracker(tmp_path / "p", logging_dir=None) as t:  # PaddleNLP's default: output_dir/runs/<date>_<host>
        assert t.run_dir.parent == tmp_path / "p" / "runs"


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
    assert files[0].parent == files[1].parent == vdl / "out"  # the resume continues the run's own folder
    assert vdl_scalars(files[-1], "reward/mean") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    texts = read_vdl(files[-1]).get_data("text", "samples/1 · from step 2")
    assert [r.id for r in texts] == [2] and "early" in texts[0].text.encoded_text_string
    # what `visualdl --logdir` serves: the newest file of the run directory
    from visualdl import LogReader

    server_view = LogReader(logdir=str(vdl))
    assert server_view.logs() == {str(vdl / "out"): files[-1].name}
    served = server_view.get_log_data("scalar", str(vdl / "out"), "0 reward and eval%reward%mean")  # its form
    assert [(step, value) for step, _, _, value in served] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_a_resume_keeps_the_history_of_copies_held_back_before_it(dirs):
    out, vdl = dirs
    with Tracker(out, logging_dir=vdl) as t:
        for step in (1, 2, 3):
            t.log(step, {"reward/mean": float(step), "reward/rule": float(step)})
    with Tracker(out, logging_dir=vdl, resume_step=2) as t:
        t.log(3, {"reward/mean": 3.0, "reward/rule": 30.0})  # now it differs: written from step 1
    assert vdl_scalars(vdl_files(vdl)[-1], "reward/rule") == [(1, 1.0), (2, 2.0), (3, 30.0)]
    assert vdl_scalars(vdl_files(vdl)[-1], "reward/mean") == [(1, 1.0), (2, 2.0), (3, 3.0)]


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
    assert calls == [("init", str(vdl / "out"), 5), ("scalar", "reward/mean", 0.5, 5), ("close",)]


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
    with Tracker(out, logging_dir=vdl, report_to=["wandb"], run_name="r1", replace=True) as t:
        t.log_hparams({"lr": 0.1, "nested": {"a": 1}})
        t.log(2, {"x": 2.0})
    assert logged == [("init", "r1"), ("config", {"lr": 0.1}), (2, {"x": 2.0}), "finish"]
