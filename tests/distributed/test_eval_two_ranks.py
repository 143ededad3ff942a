"""Evaluation sharded over 2 data-parallel ranks gives the metrics and samples of one rank (~1 min; slow)."""

import json

import pytest
from dist_helpers import HERE, tail, torchrun

from ppokit.training.evaluate import eval_chunks


def test_eval_chunks_cover_the_set_once_in_calls_of_one_rank():
    parts = [eval_chunks(7, 2, r, 2, balanced=False) for r in range(2)]
    assert parts == [[(0, True), (4, True)], [(2, True), (6, True)]]
    balanced = [eval_chunks(5, 2, r, 2, balanced=True) for r in range(2)]
    assert balanced == [[(0, True), (4, True)], [(2, True), (0, False)]]  # as many calls on every rank


@pytest.mark.slow
def test_two_ranks_evaluate_as_one(tmp_path, tiny_model_dir, prompts_file):
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(json.dumps({"prompt": f"count to {i}:"}) + "\n" for i in range(6)))
    for nproc in (1, 2):
        done = torchrun(HERE / "eval_sharded.py", tiny_model_dir, prompts_file, str(eval_file), str(tmp_path),
                        nproc=nproc)
        assert done.returncode == 0, tail(done)
    one, two = (json.loads((tmp_path / f"eval_{w}.json").read_text()) for w in (1, 2))
    assert one["metrics"]["eval/prompts"] == 6.0 and len(one["samples"]) == 12
    assert two == one
