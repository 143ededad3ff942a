"""Batch layout, trimming, overlong shaping and pass@k against hand-computed values."""

import math

import pytest
import torch

from ppokit.algos.advantages import overlong_penalty, score_to_token_rewards, zero_std_groups
from ppokit.testing import tiny_tokenizer
from ppokit.training.batch import build_batch, concat_batches
from ppokit.training.evaluate import majority_correct, pass_at_k, summarize


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def make(tok, prompts, responses, index):
    records = [{"prompt": p} for p in prompts]
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    resp = [tok(r, add_special_tokens=False)["input_ids"] for r in responses]
    return build_batch(records, ids, prompts, index, resp, ["stop"] * len(resp), tok)


def test_build_batch_left_pads_prompts_and_right_pads_responses(tok):
    b = make(tok, ["ab", "c"], ["xyz", "q", "rs"], [0, 0, 1])
    assert b.prompt_len == 2 and b.input_ids.shape == (3, 5)
    pad = tok.pad_token_id
    assert b.input_ids[2, 0] == pad and b.attention_mask[2].tolist() == [0, 1, 1, 1, 0]
    assert b.response_mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert b.group_ids.tolist() == [0, 0, 1]
    assert b.response_texts == ["xyz", "q", "rs"]


def test_trimmed_drops_all_padding_columns(tok):
    b = make(tok, ["ab", "c"], ["xyz", "q", "rs"], [0, 0, 1])
    part = b.select([2]).trimmed()  # prompt "c" (1 token), response "rs" (2 tokens)
    assert part.prompt_len == 1 and part.input_ids.shape == (1, 3)
    assert tok.decode(part.input_ids[0]) == "crs"
    assert part.response_mask.tolist() == [[1, 1]]


def test_concat_batches_repads(tok):
    a = make(tok, ["ab"], ["x"], [0])
    c = make(tok, ["c"], ["yzw"], [0])
    m = concat_batches([a, c], tok)
    assert m.prompt_len == 2 and m.response_mask.shape == (2, 3)
    assert tok.decode(m.input_ids[1][m.attention_mask[1] > 0]) == "cyzw"
    assert tok.decode(m.input_ids[0][m.attention_mask[0] > 0]) == "abx"


def test_score_sits_on_last_valid_token():
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    r = score_to_token_rewards(torch.tensor([2.0, -1.0]), mask)
    assert r.tolist() == [[0, 2, 0], [0, 0, -1]]


def test_overlong_penalty_linear_in_buffer():
    # max 10, buffer 4: no penalty up to 6 tokens, then -(len-6)/4 * factor, capped at -factor
    got = overlong_penalty(torch.tensor([5, 6, 8, 10, 12]), 10, 4, 2.0)
    assert got.tolist() == [0.0, 0.0, -1.0, -2.0, -2.0]


def test_zero_std_groups():
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 3.0])
    gids = torch.tensor([4, 4, 7, 7, 9])
    assert zero_std_groups(scores, gids).tolist() == [4, 9]


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 0, 2) == 0.0  # no correct sample
    assert pass_at_k(4, 4, 2) == 1.0  # all correct
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
    assert math.isclose(pass_at_k(5, 2, 2), 0.7)
    # k=1 is the fraction correct
    assert math.isclose(pass_at_k(8, 3, 1), 3 / 8)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_majority_vote():
    assert majority_correct(["4", "5", "4"], [True, False, True]) == 1.0
    assert majority_correct(["5", "5", "4"], [False, False, True]) == 0.0
    assert majority_correct([None, None], [False, False]) == 0.0


def test_summarize_mean_pass_maj():
    groups = {"arithmetic": [([1.0, 0.0], [True, False], ["3", "4"]), ([0.0, 0.0], [False, False], ["1", "1"])]}
    m = summarize(groups, k=2)
    assert m["eval/mean@2"] == 0.25
    assert m["eval/pass@2"] == 0.5
    assert m["eval/maj@2"] == 0.5  # tie in group 1 -> first seen "3" is correct; group 2 wrong
    assert m["eval/accuracy"] == 0.25
