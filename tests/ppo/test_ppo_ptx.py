"""PTX: ptx_coeff x the NLL of supervised targets joins every actor update."""

import pytest
import torch
from ppo_helpers import changed, distinct_chars, make_ppo, rollout_with_advantages, snapshot

from ppokit.training.ptx import ptx_nll, ptx_tensors


def test_ptx_changes_the_update_and_is_logged(tiny_model_dir, prompts_file, ptx_file, tmp_path):
    def build(name, coeff):
        return make_ppo(tiny_model_dir, prompts_file, tmp_path / name, reward=distinct_chars,
                        ptx_datasets=ptx_file, ptx_coeff=coeff)

    plain, again, ptx = build("a", 0.0), build("b", 0.0), build("c", 1.0)
    assert plain.state.ptx_loss is None and ptx.state.ptx_loss is not None
    batch = rollout_with_advantages(plain)
    start = snapshot(plain.model)
    m_plain = plain.update(batch)
    again.update(batch)
    m_ptx = ptx.update(batch)
    assert changed(start, snapshot(ptx.model))
    assert changed(snapshot(plain.model), snapshot(again.model)) == []  # same batch, same update ...
    assert changed(snapshot(plain.model), snapshot(ptx.model))  # ... unless PTX is on
    assert "actor/ptx_loss" not in m_plain
    # a random model over 260 tokens: the NLL of the targets is about ln(260) = 5.6
    assert 4.0 < m_ptx["actor/ptx_loss"] < 8.0


def test_ptx_nll_is_the_mean_nll_of_the_target_tokens(tiny_model_dir, prompts_file, ptx_file, tmp_path):
    s = make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=distinct_chars, ptx_datasets=ptx_file, ptx_coeff=1.0)
    records = s.state.ptx_loss.loader.records[:2]
    tok = s.tokenizer
    ids, att, tmask = ptx_tensors(records, tok)
    for i, r in enumerate(records):  # the target mask covers exactly the label and EOS
        target = tok(r["label"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        n = len(r["_prompt_ids"])
        assert tmask[i].nonzero().flatten().tolist() == list(range(n, n + len(target)))
        assert ids[i, n : n + len(target)].tolist() == target
    model = s.model
    model.eval()
    want, count = 0.0, 0
    with torch.no_grad():
        got = float(ptx_nll(model, records, tok, 1024, None, "cpu"))
        for r in records:  # one record at a time, no padding: -log p(target_j | prompt, target_<j)
            target = tok(r["label"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            full = torch.tensor([r["_prompt_ids"] + target])
            logp = torch.log_softmax(model(input_ids=full).logits[0].float(), -1)
            n = len(r["_prompt_ids"])
            for j, token in enumerate(target):
                want -= float(logp[n + j - 1, token])
                count += 1
    assert got == pytest.approx(want / count, abs=1e-4)


def test_ptx_without_targets_is_a_clear_error(tiny_model_dir, prompts_file, tmp_path):
    with pytest.raises(ValueError, match="needs supervised records"):
        make_ppo(tiny_model_dir, prompts_file, tmp_path, reward=distinct_chars, ptx_datasets=prompts_file, ptx_coeff=1.0)
