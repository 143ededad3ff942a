import json
from collections import Counter

import pytest

from ppokit.data import DataError, load_task_config


@pytest.fixture
def two_files(write_jsonl):
    a = write_jsonl(
        [{"src": [f"a{i}"], "tgt": [str(i)], "task": "arithmetic"} for i in range(100)], "a.jsonl"
    )
    b = write_jsonl([{"src": [f"b{i}"], "tgt": [str(i)]} for i in range(50)], "b.jsonl")
    return a, b


def _config(tmp_path, data, name="tasks.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return str(path)


def _origin(record):
    return record["source"].rsplit("/", 1)[1].split(".")[0]


def test_weights_are_fractions_of_the_largest_mix_without_repeats(tmp_path, two_files):
    a, b = two_files
    config = _config(
        tmp_path,
        {
            "tasks": [
                {"name": "A", "path": a, "weight": 0.7},
                {"name": "B", "path": b, "weight": 0.3, "task": "countdown"},
            ],
            "seed": 0,
        },
    )
    mixed = load_task_config(config)
    # size = min(100 / 0.7, 50 / 0.3) = 142 -> round(0.7 * 142) = 99 from A, round(0.3 * 142) = 43 from B
    assert Counter(_origin(r) for r in mixed) == {"a": 99, "b": 43}
    assert len({r["source"] for r in mixed}) == 142
    assert {r["task"] for r in mixed if _origin(r) == "a"} == {"arithmetic"}
    assert {r["task"] for r in mixed if _origin(r) == "b"} == {"countdown"}
    assert mixed == load_task_config(config)
    assert [r["source"] for r in mixed] != sorted(r["source"] for r in mixed)  # shuffled


def test_size_repeats_small_datasets_evenly(tmp_path, two_files):
    a, b = two_files
    config = _config(
        tmp_path,
        {
            "tasks": [{"name": "A", "path": a, "weight": 7}, {"name": "B", "path": b, "weight": 3}],
            "size": 300,
            "seed": 5,
        },
    )
    mixed = load_task_config(config)
    assert Counter(_origin(r) for r in mixed) == {"a": 210, "b": 90}
    per_record = Counter(r["source"] for r in mixed)
    assert {n for s, n in per_record.items() if "/a.jsonl" in s} == {2, 3}
    assert {n for s, n in per_record.items() if "/b.jsonl" in s} == {1, 2}
    assert sum(n == 3 for s, n in per_record.items() if "/a.jsonl" in s) == 10


def test_max_records_relative_paths_and_a_bare_list(tmp_path, two_files):
    config = _config(tmp_path, [{"path": "a.jsonl", "max_records": 10}])  # resolved beside the config file
    mixed = load_task_config(config)
    assert sorted(int(r["source"].rsplit(":", 1)[1]) for r in mixed) == list(range(1, 11))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"tasks": [{"path": "a.jsonl"}], "sed": 1},
            "{cfg}: unknown key 'sed' (did you mean 'seed'?); known keys: tasks, seed, size",
        ),
        ({"tasks": []}, "{cfg}: 'tasks' must be a non-empty list"),
        ({"tasks": [{"name": "x"}]}, "{cfg}: tasks[0].path must be a dataset path (string)"),
        (
            {"tasks": [{"path": "a.jsonl", "wieght": 2}]},
            "{cfg}: tasks[0]: unknown key 'wieght' (did you mean 'weight'?)",
        ),
        (
            {"tasks": [{"path": "a.jsonl", "weight": 0}]},
            "{cfg}: tasks[0].weight must be a positive number, got 0",
        ),
        (
            {"tasks": [{"path": "a.jsonl", "max_records": 0}]},
            "{cfg}: tasks[0].max_records must be a positive integer or null, got 0",
        ),
        (
            {"tasks": [{"path": "a.jsonl"}], "size": -3},
            "{cfg}: 'size' must be a positive integer or null, got -3",
        ),
        (
            {"tasks": [{"name": "k", "path": "a.jsonl"}, {"name": "k", "path": "b.jsonl"}]},
            "{cfg}: task name 'k' is used twice",
        ),
        (
            {"tasks": [{"name": "gone", "path": "missing.jsonl"}]},
            "{cfg}: tasks[0] (gone): dataset file not found: missing.jsonl",
        ),
        ('{"tasks": [\n  {"path": "a.jsonl"},\n]}', "{cfg}:2:22: invalid JSON: a trailing comma before ']' is not JSON (remove the comma)"),
        ("[1]", "{cfg}: tasks[0] must be an object with 'path'"),
    ],
)
def test_errors_name_the_file_and_key(tmp_path, two_files, data, message):
    config = _config(tmp_path, data)
    with pytest.raises(DataError) as err:
        load_task_config(config)
    assert str(err.value).startswith(message.format(cfg=config))


def test_missing_task_config(tmp_path):
    with pytest.raises(DataError, match="task config not found: .*nope.json"):
        load_task_config(str(tmp_path / "nope.json"))
