"""Every reader, and load_datasets' spec forms and file errors."""

import json

import pytest

from ppokit.data import DataError, load_datasets

ROWS = [{"src": ["What is 1 + 1?"], "tgt": ["2"], "task": "arithmetic"}, {"src": "Hi", "extra": [1, 2]}]


def _summary(records):
    return [(r.get("messages", [{}])[-1].get("content"), r["label"], r["task"], r["fields"]) for r in records]


EXPECTED = [("What is 1 + 1?", "2", "arithmetic", {}), ("Hi", None, None, {"extra": [1, 2]})]


def test_jsonl_skips_blank_lines_and_numbers_real_lines(write_jsonl):
    path = write_jsonl([json.dumps(ROWS[0]), "", "  ", json.dumps(ROWS[1])])
    records = load_datasets(path)
    assert _summary(records) == EXPECTED
    assert [r["source"] for r in records] == [f"{path}:1", f"{path}:4"]


@pytest.mark.parametrize(
    "text",
    [json.dumps(ROWS), json.dumps({"data": ROWS}), "\n".join(json.dumps(r) for r in ROWS)],
    ids=["list", "data-key", "json-lines"],
)
def test_json_files(tmp_path, text):
    path = tmp_path / "d.json"
    path.write_text(text, encoding="utf-8")
    assert _summary(load_datasets(str(path))) == EXPECTED


def test_json_single_object(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(ROWS[0]), encoding="utf-8")
    [record] = load_datasets(str(path))
    assert record["label"] == "2" and record["source"] == f"{path}#1"


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"src": ["a"], "tgt": ["b"], "n": 1}, {"src": ["c"], "tgt": ["d"], "n": 2}]),
        path,
    )
    records = load_datasets(str(path))
    assert [(r["messages"][0]["content"], r["label"], r["fields"]) for r in records] == [
        ("a", "b", {"n": 1}),
        ("c", "d", {"n": 2}),
    ]
    assert records[1]["source"] == f"{path}#2"


def test_saved_hf_datasets_folder(tmp_path):
    import datasets

    rows = {
        "prompt": [[{"role": "user", "content": "x"}], [{"role": "user", "content": "y"}]],
        "reward_model": [{"ground_truth": "1"}, {"ground_truth": "2"}],
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "ds"))
    records = load_datasets(str(tmp_path / "ds"))
    assert [(r["messages"][0]["content"], r["label"]) for r in records] == [("x", "1"), ("y", "2")]
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"src": ["t"]}),
            "test": datasets.Dataset.from_dict({"src": ["u"]}),
        }
    ).save_to_disk(str(tmp_path / "dd"))
    assert [r["messages"][0]["content"] for r in load_datasets(str(tmp_path / "dd"))] == ["t"]


def test_comma_lists_and_paddlenlp_spellings(write_jsonl):
    a = write_jsonl([{"src": f"a{i}"} for i in range(10)], "a.jsonl")
    b = write_jsonl([{"src": "b"}], "b.jsonl")
    assert len(load_datasets(f"{a}, {b}")) == 11
    assert len(load_datasets(f"Jsonfile::{b}")) == 1
    half = load_datasets(f"mine:0.5:{a}")
    assert len(half) == 5 and half == sorted(half, key=lambda r: int(r["source"].rsplit(":", 1)[1]))
    assert len(load_datasets(f"mine:3/-1:{a}")) == 3
    assert len(load_datasets(f"mine:2:{b}")) == 2  # a proportion over 1 repeats


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no dataset given"),
        ("nope/train.jsonl", "dataset file not found: nope/train.jsonl"),
        ("PKU-SafeRLHF/train", "dataset 'PKU-SafeRLHF/train' is one of PaddleNLP's registered datasets"),
        (
            "alpaca:0.5",
            "dataset 'alpaca:0.5': PaddleNLP's registered datasets (name[:proportion]) are not available",
        ),
    ],
)
def test_spec_errors(spec, message):
    with pytest.raises(DataError) as err:
        load_datasets(spec)
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("e.jsonl", "", "{path}: the dataset has no rows"),
        ("e.jsonl", "\n\n", "{path}: the dataset has no rows"),
        ("e.json", "[]", "{path}: the dataset has no rows"),
        (
            "bad.jsonl",
            '{"src": "ok"}\n{"src": "oops",}\n',
            "{path}:2:15: invalid JSON: a trailing comma before '}}' is not JSON (remove the comma)",
        ),
        ("bad.json", '[\n {"src": "a"},\n {"src": \n]', "{path}:4: invalid JSON: Expecting value (column 1)"),
        (
            "row.jsonl",
            '["src", "tgt"]\n',
            "{path}:1: expected a JSON object (a row with fields such as 'src'), got list",
        ),
        ("d.csv", "src\nhi\n", "{path}: unsupported dataset file type"),
        (
            "mix.json",
            '{"tasks": [{"path": "a.jsonl"}]}',
            "{path}: this is a task config (it has 'tasks'), not a dataset",
        ),
        ("bin.jsonl", b"\xff\xfe", "{path}:1: the file is not UTF-8 text (invalid start byte at byte 0, column 1)"),
    ],
)
def test_bad_files(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(DataError) as err:
        load_datasets(str(path))
    assert str(err.value).startswith(message.format(path=path))


def test_plain_folder_is_not_a_dataset(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="a folder must be one written by datasets' save_to_disk"):
        load_datasets(str(tmp_path / "folder"))
