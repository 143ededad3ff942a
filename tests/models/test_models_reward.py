import pytest
import torch

from ppokit.models import load_reward_model, load_tokenizer, score_texts
from ppokit.testing import tiny_model_config, tiny_tokenizer


@pytest.fixture(scope="module")
def reward_dir(tmp_path_factory):
    from transformers import AutoModelForSequenceClassification

    path = tmp_path_factory.mktemp("rm")
    tok = tiny_tokenizer()
    config = tiny_model_config(tok)
    config.num_labels = 1
    torch.manual_seed(5)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_scores_do_not_depend_on_batching_or_padding(reward_dir):
    tok = load_tokenizer(reward_dir, padding_side="right")
    model = load_reward_model(reward_dir, tokenizer=tok)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    prompts = ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "q: ", "a much longer prompt here: "]
    responses = ["hello<|im_end|>", "x", "yes, with a longer answer"]
    batched = score_texts(model, tok, prompts, responses, batch_size=3)
    single = torch.cat([score_texts(model, tok, [p], [r], batch_size=1) for p, r in zip(prompts, responses)])
    assert batched.shape == (3,) and batched.dtype == torch.float32
    torch.testing.assert_close(batched, single, atol=1e-5, rtol=1e-5)
    assert score_texts(model, tok, prompts, responses, batch_size=2).tolist() == pytest.approx(batched.tolist(), abs=1e-5)


def test_a_plain_language_model_is_not_a_reward_model(tiny_model_dir):
    with pytest.raises(ValueError, match="no trained reward head"):
        load_reward_model(tiny_model_dir)


def test_unpaired_texts_and_unaligned_pad_are_errors(reward_dir):
    tok = load_tokenizer(reward_dir, padding_side="right")
    model = load_reward_model(reward_dir, tokenizer=tok)
    with pytest.raises(ValueError, match="pair up"):
        score_texts(model, tok, ["a", "b"], ["c"])
    model.config.pad_token_id = tok.eos_token_id
    with pytest.raises(ValueError, match="load_reward_model"):
        score_texts(model, tok, ["a"], ["b"])
