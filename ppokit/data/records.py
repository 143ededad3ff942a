"""Turning one dataset row into a ppokit Record.

A Record is a plain dict:
    prompt | messages   exactly one: `prompt` (str, used verbatim, already templated) or `messages`
                        (list of {"role", "content"}, rendered with the chat template + generation prompt)
    label               str | None: the reference answer (for rewards)
    task                str | None: the built-in task (or user tag) that scores it
    source              "path/train.jsonl:17": where the row came from
    fields              dict: every other field of the row (data_source, extra_info, reward_model, ...)

Row formats, tried in this order (see docs/data.md):
    src/tgt             `prompt_key` / `response_key` (default "src" / "tgt"), strings or lists of turns
    messages            {"messages": [{"role", "content"}, ...]}; a final assistant turn is the label
    chat prompt (verl)  {"prompt": [{"role", "content"}, ...], "data_source", "reward_model": {"ground_truth"}}
    prompt              {"prompt": "text"}: used verbatim
"""

from __future__ import annotations

import json

from ppokit.data.errors import DataError

# Markers of a prompt that already went through a chat template (matched anywhere in the text). Generous
# on purpose: a src that contains one of these is used verbatim, as PaddleNLP uses every src verbatim.
# fmt: off
TEMPLATE_MARKERS = (
    "<|im_start|>", "<|im_end|>",                                  # ChatML: Qwen, SmolLM, InternLM, Yi
    "<|begin_of_text|>", "<|start_header_id|>", "<|eot_id|>",     # Llama 3
    "[INST]", "[/INST]", "<<SYS>>",                                # Llama 2, Mistral
    "<start_of_turn>", "<end_of_turn>",                            # Gemma
    "<|user|>", "<|assistant|>", "<|system|>", "<|end|>",          # Phi-3, Zephyr, GLM
    "<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>",      # DeepSeek
    "<|User|>", "<|Assistant|>",
    "<|begin_of_sentence|>", "<|end_of_sentence|>",                # ERNIE
    "<|start|>", "<|message|>",                                    # gpt-oss (harmony)
    "[gMASK]<sop>",                                                # ChatGLM
)
# fmt: on
LABEL_KEY = "label"


def is_templated(text: str) -> bool:
    """True when `text` already carries a chat template (contains one of TEMPLATE_MARKERS)."""
    return any(marker in text for marker in TEMPLATE_MARKERS)


def _as_text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def _turns(row: dict, key: str, where: str, required: bool) -> list[str]:
    value = row.get(key)
    if value is None:
        if required:
            raise DataError(f"{where}: '{key}' is missing or null; expected a string or a list of strings")
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise DataError(
            f"{where}: '{key}' is a {type(value).__name__}; expected a string or a list of strings"
        )
    for i, turn in enumerate(value):
        if not isinstance(turn, str):
            raise DataError(f"{where}: '{key}'[{i}] is a {type(turn).__name__}; expected a string")
    return list(value)


def _from_src_tgt(row: dict, where: str, prompt_key: str, response_key: str) -> tuple[dict, str | None, str]:
    src = _turns(row, prompt_key, where, required=True)
    tgt = _turns(row, response_key, where, required=False)
    if not src or not "".join(src).strip():
        raise DataError(f"{where}: '{prompt_key}' is empty; expected at least one non-empty user turn")
    if len(tgt) not in (len(src) - 1, len(src)):
        raise DataError(
            f"{where}: '{response_key}' has {len(tgt)} turns but '{prompt_key}' has {len(src)}; "
            f"expected {len(src) - 1} or {len(src)}"
        )
    label = tgt[-1] if len(tgt) == len(src) else None
    if len(src) == 1 and is_templated(src[0]):
        return {"prompt": src[0]}, label, "templated src"
    messages = []
    for i, user in enumerate(src):
        messages.append({"role": "user", "content": user})
        if i < len(src) - 1:
            messages.append({"role": "assistant", "content": tgt[i]})
    kind = "src/tgt with reference" if label is not None else "src/tgt conversation"
    return {"messages": messages}, label, kind


def _content(value, where: str, i: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in value):
        return "".join(str(p.get("text", "")) for p in value)
    raise DataError(f"{where}: message {i} 'content' is a {type(value).__name__}; expected a string")


def _from_messages(value, key: str, where: str) -> tuple[dict, str | None]:
    if not isinstance(value, list) or not value:
        raise DataError(f'{where}: \'{key}\' must be a non-empty list of {{"role", "content"}} messages')
    messages = []
    for i, msg in enumerate(value):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or "content" not in msg:
            raise DataError(f"{where}: '{key}'[{i}] must be an object with a string 'role' and a 'content'")
        content = _content(msg["content"], where, i)
        if msg["role"] == "user" and not content.strip():
            raise DataError(f"{where}: '{key}'[{i}] 'content' is empty; expected a non-empty user turn")
        messages.append({"role": msg["role"], "content": content})
    label = None
    if messages[-1]["role"] == "assistant":
        label = messages.pop()["content"]
    if not messages:
        raise DataError(f"{where}: '{key}' holds only an assistant turn; expected at least one user turn")
    return {"messages": messages}, label


def _check_unicode(body: dict, where: str, name: str) -> None:
    """A lone surrogate (e.g. "\\ud800" in JSON, half of an emoji cut in two) is not text a tokenizer can read."""
    texts = [(f"'{name}'", body["prompt"])] if "prompt" in body else [
        (f"'{name}' turn {i} ({m['role']})", m["content"]) for i, m in enumerate(body["messages"])]
    for field, text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DataError(f"{where}: {field} holds a lone surrogate ({text[exc.start]!r} at character "
                            f"{exc.start}), which is not valid Unicode; fix that text (often half of an emoji "
                            "cut in two)") from None


def _task_of(row: dict) -> str | None:
    task = row.get("task")
    if isinstance(task, str) and task:
        return task
    source = row.get("data_source")
    if isinstance(source, str):
        from ppokit.tasks import ALIASES, TASKS

        if source in TASKS or source in ALIASES:
            return ALIASES.get(source, source)
    return None


def _extra_label(row: dict, response_key: str, consumed: set[str]) -> str | None:
    """A label from outside the turns: verl's reward_model.ground_truth, a 'label' field, or `response_key`."""
    reward_model = row.get("reward_model")
    if isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
        return _as_text(reward_model["ground_truth"])
    for key in (LABEL_KEY, response_key):
        value = row.get(key)
        if key not in consumed and value is not None:
            consumed.add(key)
            return _as_text(value[-1] if isinstance(value, list) and value else value)
    return None


def _is_chat_list(value) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict)


def row_to_record(
    row: dict, where: str, prompt_key: str = "src", response_key: str = "tgt"
) -> tuple[dict, str]:
    """(Record, format name) for one row; a bad row raises DataError naming `where` and the field."""
    consumed = {"task"}
    if prompt_key in row and not _is_chat_list(row[prompt_key]):
        body, label, kind = _from_src_tgt(row, where, prompt_key, response_key)
        consumed |= {prompt_key, response_key}
        field = prompt_key
    elif "messages" in row:
        body, label = _from_messages(row["messages"], "messages", where)
        kind = "messages"
        consumed.add("messages")
        field = "messages"
    elif _is_chat_list(row.get(prompt_key)) or _is_chat_list(row.get("prompt")):
        key = prompt_key if _is_chat_list(row.get(prompt_key)) else "prompt"
        body, label = _from_messages(row[key], key, where)
        kind = "chat prompt (verl)"
        consumed.add(key)
        field = key
    elif isinstance(row.get("prompt"), str):
        if not row["prompt"].strip():
            raise DataError(f"{where}: 'prompt' is empty")
        body, label, kind = {"prompt": row["prompt"]}, None, "prompt"
        consumed.add("prompt")
        field = "prompt"
    else:
        keys = ", ".join(sorted(row)) or "none"
        raise DataError(
            f"{where}: no prompt found; expected '{prompt_key}' (src/tgt), 'messages' or 'prompt' "
            f"(the row has keys: {keys})"
        )
    if label is None:
        label = _extra_label(row, response_key, consumed)
    _check_unicode(body, where, field)
    fields = {k: v for k, v in row.items() if k not in consumed}
    record = {**body, "label": label, "task": _task_of(row), "source": where, "fields": fields}
    return record, kind
