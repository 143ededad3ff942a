"""Prompt rendering and tokenization.

`render_prompt(record, tokenizer)`: a record's `prompt` is returned verbatim; its `messages` go through
the tokenizer's chat template with the generation prompt appended. A tokenizer without a chat template
(or `tokenizer=None`) gets the plain rendering below, with one warning per process:

    System: {system}          (only when there is a system message)
    User: {user turn}
    Assistant: {assistant turn}
    User: {last user turn}
    Assistant:
"""

from __future__ import annotations

import logging

from ppokit.data.errors import DataError

logger = logging.getLogger("ppokit.data")
_warned_plain = False


def render_plain(messages: list[dict]) -> str:
    """The documented rendering for models without a chat template: "Role: content" lines, then "Assistant:"."""
    lines = [f"{str(m['role']).capitalize()}: {m['content']}" for m in messages]
    return "\n".join(lines + ["Assistant:"])


def _warn_plain_once(tokenizer) -> None:
    global _warned_plain
    if not _warned_plain:
        _warned_plain = True
        name = getattr(tokenizer, "name_or_path", None) or "the tokenizer"
        logger.warning(
            "%s has no chat template; prompts are rendered as 'User: ...\\nAssistant:' turns (see docs/data.md). "
            "Give the model a chat template, or write already-templated prompts, to control this.",
            name,
        )


def render_prompt(record: dict, tokenizer) -> str:
    """The text the model sees for `record`: verbatim `prompt`, or `messages` through the chat template."""
    if record.get("prompt") is not None:
        return record["prompt"]
    messages = record.get("messages")
    if not messages:
        raise DataError(f"{record.get('source', 'record')}: the record has neither 'prompt' nor 'messages'")
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        _warn_plain_once(tokenizer)
        return render_plain(messages)
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as err:  # jinja raises TemplateError and others for unsupported roles/orders
        raise DataError(
            f"{record.get('source', 'record')}: the tokenizer's chat template failed on this record: {err}"
        ) from err
    if not isinstance(text, str):
        raise DataError(
            f"{record.get('source', 'record')}: the chat template returned {type(text).__name__}, not text"
        )
    return text


def choose_chat_template(tokenizer, chat_template: str | None, given: bool, model_path: str | None = None) -> str:
    """Apply the `chat_template` key to `tokenizer` (in place); returns what prompts are rendered with.

    Not given: the tokenizer's own template (ppokit's default: instruct models need it; PaddleNLP E5+ used
    prompts verbatim). 'none' given: no template, as PaddleNLP (`prompt` records verbatim, `messages` as plain
    'User:/Assistant:' turns). The model path: the tokenizer's own. A folder: its chat_template.json (or
    chat_template.jinja); a file: a .json with a "chat_template" string, or the template text itself."""
    import json
    from pathlib import Path

    if not given or not chat_template or (model_path and str(chat_template) == str(model_path)):
        return "the tokenizer's own chat template" if getattr(tokenizer, "chat_template", None) else "no chat template"
    if str(chat_template).lower() == "none":
        tokenizer.chat_template = None
        return "no chat template (chat_template: none)"
    path = Path(chat_template)
    if path.is_dir():
        found = [p for p in (path / "chat_template.json", path / "chat_template.jinja") if p.is_file()]
        if not found:
            raise DataError(f"chat_template: {path} holds neither chat_template.json nor chat_template.jinja")
        path = found[0]
    if not path.is_file():
        raise DataError(f"chat_template: {chat_template!r} is neither 'none', the model path, a folder nor a file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            text = json.loads(text)["chat_template"]
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"{path}: expected a JSON object with a 'chat_template' string ({err})") from None
    tokenizer.chat_template = text
    return f"the chat template from {path}"


# chat-template markers of a user turn in an already-rendered prompt: (start of the turn, its end)
_USER_TURN_MARKERS = (
    ("<|im_start|>user\n", "<|im_end|>"),  # ChatML (Qwen, SmolLM2)
    ("<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>"),  # Llama 3
    ("[INST]", "[/INST]"),  # Llama 2, Mistral
    ("\nUser: ", "\nAssistant:"),  # render_plain
)


def question_text(record: dict | None, rendered: str = "") -> str:
    """The user's last turn: what a person asked, without the system prompt and chat-template markup.

    From the record's `messages` when it has them, else cut out of the rendered prompt (ChatML, Llama
    and plain "User:" turns are recognised); a prompt in no known template is returned whole.
    """
    messages = (record or {}).get("messages") or []
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if users:
        return str(users[-1].get("content", "")).strip()
    text = rendered or str((record or {}).get("prompt") or "")
    for start, end in _USER_TURN_MARKERS:
        at = ("\n" + text).rfind(start) if start.startswith("\n") else text.rfind(start)
        if at >= 0:
            begin = at + len(start) - (1 if start.startswith("\n") else 0)
            stop = text.find(end, begin)
            return text[begin: stop if stop >= 0 else len(text)].strip()
    return text.strip()


def _bos_to_add(tokenizer) -> int | None:
    """The BOS id the tokenizer would add itself with add_special_tokens=True, else None."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return None
    with_special = tokenizer("a", add_special_tokens=True)["input_ids"]
    without = tokenizer("a", add_special_tokens=False)["input_ids"]
    return bos if with_special[:1] == [bos] and without[:1] != [bos] else None


def prompt_token_ids(records: list[dict], tokenizer) -> list[list[int]]:
    """The token ids training gives each record's rendered prompt (BOS rule of `encode_prompts`)."""
    texts = [render_prompt(r, tokenizer) for r in records]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    bos = _bos_to_add(tokenizer)
    if bos is not None:
        ids = [seq if seq[:1] == [bos] else [bos] + list(seq) for seq in ids]
    return [list(seq) for seq in ids]


def encode_prompts(
    records: list[dict], tokenizer, max_prompt_len: int | None
) -> tuple[list[dict], list[list[int]], int]:
    """Render and tokenize prompts; drop (count, report) those over `max_prompt_len` tokens.

    Rendered text is tokenized with add_special_tokens=False (templates carry their own BOS); a BOS is
    prepended only when the tokenizer would add one itself and the text does not already start with it.
    Returns (records kept, token ids, number dropped); nothing left is a DataError.
    """
    if not records:
        raise DataError("there are no prompts to encode: the dataset is empty")
    ids = prompt_token_ids(records, tokenizer)
    limit = max_prompt_len if max_prompt_len and max_prompt_len > 0 else None
    kept = [(r, list(seq)) for r, seq in zip(records, ids) if limit is None or len(seq) <= limit]
    dropped = len(records) - len(kept)
    if not kept:
        shortest = min(len(seq) for seq in ids)
        raise DataError(
            f"all {len(records)} prompts are longer than max_prompt_len={limit} tokens (the shortest has "
            f"{shortest}); raise max_prompt_len or shorten the prompts"
        )
    if dropped:
        longest = max(len(seq) for seq in ids)
        logger.warning(
            "dropped %d of %d prompts longer than max_prompt_len=%d tokens (longest: %d tokens), e.g. %s",
            dropped,
            len(records),
            limit,
            longest,
            next(r.get("source") for r, seq in zip(records, ids) if len(seq) > limit),
        )
    return [r for r, _ in kept], [seq for _, seq in kept], dropped
