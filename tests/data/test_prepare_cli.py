"""`python -m ppokit.data prepare|generate|check`, and ensure_prepared."""

import dataclasses
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ppokit.data import LAYOUTS, ensure_prepared, load_datasets
from ppokit.data.cli import main
from ppokit.tasks import get
from ppokit.testing import tiny_tokenizer


def _rows(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def test_prepare_ppo_kk_in_paddlenlp_layout_is_byte_identical(tmp_path, monkeypatch, capsys):
    outputs = []
    for run in ("one", "two"):
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        assert main(["prepare", "ppo-kk", "--train-size", "60", "--test-size", "20"]) == 0
        outputs.append(
            {
                p: (tmp_path / run / p).read_bytes()
                for p in ("ppo-kk/34567ppl/train.jsonl", "ppo-kk/5ppl/test.jsonl")
            }
        )
    assert outputs[0] == outputs[1]
    assert capsys.readouterr().out.splitlines()[:2] == [
        "wrote 60 rows to ppo-kk/34567ppl/train.jsonl",
        "wrote 20 rows to ppo-kk/5ppl/test.jsonl",
    ]
    train, test = _rows("ppo-kk/34567ppl/train.jsonl"), _rows("ppo-kk/5ppl/test.jsonl")
    assert Counter(r["people"] for r in train) == {3: 12, 4: 12, 5: 12, 6: 12, 7: 12}
    assert {r["people"] for r in test} == {5}
    assert not {r["src"][0] for r in train} & {r["src"][0] for r in test}
    assert len({r["src"][0] for r in train}) == 60
    assert (
        set(train[0]) == {"src", "tgt", "task", "people"}
        and len(train[0]["src"]) == len(train[0]["tgt"]) == 1
    )


def test_prepare_with_a_seed_changes_the_data(tmp_path):
    assert (
        main(["prepare", "countdown", "--out", str(tmp_path / "a"), "--train-size", "20", "--test-size", "5"])
        == 0
    )
    assert (
        main(
            [
                "prepare",
                "countdown",
                "--out",
                str(tmp_path / "b"),
                "--train-size",
                "20",
                "--test-size",
                "5",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    a, b = (tmp_path / d / "countdown/train.jsonl" for d in "ab")
    assert a.read_bytes() != b.read_bytes() and len(_rows(a)) == len(_rows(b)) == 20


def test_prepare_arithmetic_defaults_never_overlap_and_fill_with_repeats(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    assert main(["prepare", "arithmetic"]) == 0
    train, test = _rows("data/arithmetic/train.jsonl"), _rows("data/arithmetic/test.jsonl")
    assert (len(train), len(test)) == (2000, 30)
    test_prompts = {r["src"][0] for r in test}
    assert len(test_prompts) == 30 and not test_prompts & {r["src"][0] for r in train}
    # 1-digit a + b (100) and a - b with a >= b (55): 155 problems, 30 held out for test
    assert len({r["src"][0] for r in train}) == 125
    assert "only 125 distinct prompts at this difficulty outside the test split" in caplog.text


def test_prepare_difficulty_options_and_a_test_split_that_eats_everything(tmp_path, capsys):
    assert (
        main(
            [
                "prepare",
                "arithmetic",
                "--out",
                str(tmp_path),
                "--train-size",
                "10",
                "--test-size",
                "3",
                "--digits",
                "2",
                "--ops",
                "*",
            ]
        )
        == 0
    )
    assert all(" × " in r["expression"] for r in _rows(tmp_path / "arithmetic/train.jsonl"))
    assert main(["prepare", "arithmetic", "--out", str(tmp_path), "--test-size", "500"]) == 2
    assert (
        "error: prepare arithmetic: every distinct prompt at this difficulty went to the test split (155)"
        in capsys.readouterr().err
    )
    assert main(["prepare", "ppo-kk", "--people", "4"]) == 2


def test_generate_writes_the_task_rows(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    assert (
        main(
            [
                "generate",
                "arithmetic",
                "--n",
                "5",
                "--out",
                str(out),
                "--seed",
                "3",
                "--digits",
                "2",
                "--ops",
                "+*",
            ]
        )
        == 0
    )
    assert _rows(out) == get("arithmetic").generate(5, 3, digits=2, ops="+*")
    first = out.read_bytes()
    assert (
        main(
            [
                "generate",
                "arithmetic",
                "--n",
                "5",
                "--out",
                str(out),
                "--seed",
                "3",
                "--digits",
                "2",
                "--ops",
                "+*",
            ]
        )
        == 0
    )
    assert out.read_bytes() == first
    assert (
        main(
            ["generate", "knights_knaves", "--n", "2", "--out", str(tmp_path / "k.jsonl"), "--people", "3-4"]
        )
        == 0
    )
    assert [r["people"] for r in _rows(tmp_path / "k.jsonl")] == [3, 4]
    assert main(["generate", "arithmetic", "--n", "1", "--out", str(out), "--digitz", "2"]) == 2
    assert (
        "error: arithmetic: unknown difficulty option 'digitz' (did you mean 'digits'?)"
        in capsys.readouterr().err
    )
    assert main(["generate", "sudoku", "--n", "1", "--out", str(out)]) == 2
    assert (
        "unknown task 'sudoku'; known tasks: knights_knaves, arithmetic, countdown" in capsys.readouterr().err
    )


def test_check_prints_counts_format_and_the_first_prompt(tmp_path, write_jsonl, capsys):
    path = write_jsonl(
        [{"src": ["What is 2 + 2?"], "tgt": ["4"], "task": "arithmetic"}, {"src": ["Hi"], "tgt": []}]
    )
    assert main(["check", path]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:3] == [
        f"{path}: 2 records, 1 with a reference answer",
        "format: src/tgt with reference (1), src/tgt conversation (1)",
        "tasks: arithmetic (1), - (1)",
    ]
    assert "User: What is 2 + 2?\nAssistant:\nits reference answer:\n4" in out
    model = tmp_path / "model"
    tiny_tokenizer().save_pretrained(model)
    assert main(["check", path, "--model", str(model)]) == 0
    assert "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n" in capsys.readouterr().out
    assert main(["check", path, "--model", str(tmp_path / "model.gguf")]) == 0
    assert "is not a Hugging Face tokenizer folder" in capsys.readouterr().out


def test_check_reports_bad_input_with_exit_2_and_no_traceback(write_jsonl):
    path = write_jsonl([{"src": ["q"], "tgt": ["a"]}] * 16 + [{"src": ["a", "b"], "tgt": ["1", "2", "3"]}])
    proc = subprocess.run(
        [sys.executable, "-m", "ppokit.data", "check", path], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {path}:17: 'tgt' has 3 turns but 'src' has 2; expected 1 or 2"
    assert "Traceback" not in proc.stderr + proc.stdout


def test_check_a_task_config(tmp_path, write_jsonl, capsys):
    write_jsonl([{"src": "a", "tgt": "1"}], "a.jsonl")
    config = tmp_path / "mix.json"
    config.write_text(json.dumps({"tasks": [{"name": "a", "path": "a.jsonl", "task": "arithmetic"}]}))
    assert main(["check", str(config)]) == 0
    assert "1 records, 1 with a reference answer" in capsys.readouterr().out


@pytest.fixture
def small_layouts(monkeypatch):
    for name, layout in LAYOUTS.items():
        small = dataclasses.replace(
            layout,
            train=dataclasses.replace(layout.train, size=12),
            test=dataclasses.replace(layout.test, size=4),
        )
        monkeypatch.setitem(LAYOUTS, name, small)


def test_ensure_prepared_generates_known_layouts_where_the_config_points(
    tmp_path, monkeypatch, small_layouts, caplog
):
    monkeypatch.chdir(tmp_path)
    records = load_datasets("ppo-kk/5ppl/test.jsonl")  # PaddleNLP's eval_datasets path, missing at first
    assert len(records) == 4 and {r["task"] for r in records} == {"knights_knaves"}
    assert all(r["label"].startswith("(1) ") for r in records)
    assert Path("ppo-kk/34567ppl/train.jsonl").exists()
    assert "ppo-kk/5ppl/test.jsonl was missing: generated" in caplog.text
    assert ensure_prepared("ppo-kk/5ppl/test.jsonl") is False  # exists now
    assert ensure_prepared(str(tmp_path / "sub/arithmetic/test.jsonl")) is True
    assert len(_rows(tmp_path / "sub/arithmetic/train.jsonl")) == 12
    assert ensure_prepared("elsewhere/train.jsonl") is False
    assert not Path("elsewhere").exists()


def test_ensure_prepared_leaves_existing_files_alone(tmp_path, small_layouts):
    train = tmp_path / "countdown/train.jsonl"
    train.parent.mkdir()
    train.write_text('{"src": "mine"}\n')
    assert ensure_prepared(tmp_path / "countdown/test.jsonl") is True
    assert train.read_text() == '{"src": "mine"}\n'
    assert len(_rows(tmp_path / "countdown/test.jsonl")) == 4


def test_check_flags_prompts_over_max_prompt_len_with_file_and_line(tmp_path, write_jsonl, capsys):
    rows = [{"src": ["short?"], "tgt": ["a"]}, {"src": ["x" * 200], "tgt": ["b"]}, {"src": ["ok"], "tgt": ["c"]}]
    path = write_jsonl(rows)
    model = tmp_path / "model"
    tiny_tokenizer().save_pretrained(model)
    assert main(["check", path, "--model", str(model), "--max-prompt-len", "64"]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2: the prompt has 219 tokens, more than max_prompt_len=64; training drops it" in out
    assert "1 of 3 prompts are longer than max_prompt_len=64" in out
    assert main(["check", path, "--model", str(model), "--max-prompt-len", "256"]) == 0
    assert "longer than" not in capsys.readouterr().out


def test_check_warns_about_duplicate_rows(write_jsonl, capsys):
    path = write_jsonl([{"src": ["q1"], "tgt": ["a"]}, {"src": ["q2"], "tgt": ["b"]}, {"src": ["q1"], "tgt": ["a"]},
                        {"src": ["q1"], "tgt": ["a"]}])
    assert main(["check", path]) == 0
    out = capsys.readouterr().out
    assert f"warning: 2 duplicate rows: {path}:3 repeats {path}:1, {path}:4 repeats {path}:1" in out


def test_non_utf8_bytes_are_reported_with_the_line(tmp_path, capsys):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"src": ["fine"], "tgt": ["a"]}\n{"src": ["caf\xe9"], "tgt": ["b"]}\n')
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}:2: the file is not UTF-8 text (invalid continuation byte at byte 45, column 14)" in err
