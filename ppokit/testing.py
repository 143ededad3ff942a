"""Tiny models and tokenizers built in code, for tests and quick notebook runs.

Nothing here downloads anything: the tokenizer is byte-level (every UTF-8 string round-trips) with
ChatML special tokens and a chat template, and the models are randomly initialised from a seed.
"""

from __future__ import annotations

import os

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]


def tiny_tokenizer(chat_template: bool = True):
    """A byte-level tokenizer (256 byte tokens + ChatML specials); eos = <|im_end|>, pad = <pad>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token=None,
        additional_special_tokens=["<|endoftext|>", "<|im_start|>"],
    )
    if chat_template:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_model_config(tokenizer, arch: str = "llama", hidden: int = 64, layers: int = 2):
    """A transformers config for a tiny causal LM over `tokenizer`'s vocabulary."""
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    if arch == "qwen2":
        return Qwen2Config(**common)
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen3":
        return Qwen3Config(**common, head_dim=hidden // 4)
    if arch == "mistral":
        return MistralConfig(**common, sliding_window=None)
    raise ValueError(f"tiny_model_config: unknown arch {arch!r}; expected 'llama', 'qwen2', 'qwen3' or 'mistral'")


def tiny_causal_lm(tokenizer=None, arch: str = "llama", seed: int = 0, hidden: int = 64, layers: int = 2):
    """A randomly initialised tiny causal LM (float32), deterministic for a given seed."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = tokenizer or tiny_tokenizer()
    torch.manual_seed(seed)
    config = tiny_model_config(tokenizer, arch=arch, hidden=hidden, layers=layers)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def save_tiny_model(path: str | os.PathLike, arch: str = "llama", seed: int = 0, **kwargs) -> str:
    """Write a tiny model + tokenizer as a HF folder at `path` and return it (for configs in tests)."""
    tokenizer = tiny_tokenizer()
    model = tiny_causal_lm(tokenizer, arch=arch, seed=seed, **kwargs)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def letter_a(prompts, responses, **fields):
    """Reward: fraction of 'a' characters in the response — a task a tiny random model learns in a few dozen steps."""
    return [r.count("a") / max(len(r), 1) for r in responses]


def distinct_chars(prompts, responses, **fields):
    """Reward: number of distinct characters — varies between samples, so advantages are never all zero."""
    return [float(len(set(r))) for r in responses]


def wait_until_serving(proc, url: str, tries: int = 600) -> None:
    """Wait (bounded) until the server process `proc` answers `url`/health; its output is the error if it exits."""
    import time

    import httpx

    for _ in range(tries):
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise TimeoutError(f"{url}/health did not answer")
