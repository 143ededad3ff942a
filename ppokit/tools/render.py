"""Tool results into tokens: the chat template's own markup keeps its special tokens, the tool's text never does.

A tool result is data from outside the model. Encoded as part of the rendered turn, a result holding ``<|im_end|>``
or ``<|im_start|>`` would become the real end-of-turn / start-of-turn tokens and could forge a chat turn in the
model's context. So the turn is rendered with a placeholder per result, the template's pieces are encoded as usual
(their special tokens are real) and each result is encoded as plain text: special-token strings in it become the
ordinary tokens of their characters.
"""

from __future__ import annotations

from collections.abc import Callable

_HOLE = "\x00PPOKIT-TOOL-RESULT-{}\x00"


def _special_ids(tokenizer) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(i for i, tok in decoder.items() if getattr(tok, "special", False))
    return ids


def encode_text(tokenizer, text: str) -> list[int]:
    """`text`'s tokens with no special token in them (special-token strings are split into ordinary tokens)."""
    special = _special_ids(tokenizer)
    try:
        ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    except TypeError:  # a tokenizer without split_special_tokens
        ids = None
    if ids is not None and not special.intersection(ids):
        return list(ids)
    # The tokenizer matched a special token anyway: encode around every match so that none can form.
    out: list[int] = []
    for piece in _split_specials(text, tokenizer):
        out += tokenizer.encode(piece, add_special_tokens=False)
    return out


def _split_specials(text: str, tokenizer) -> list[str]:
    """`text` cut so that no piece holds a whole special-token string (each is cut before its last character)."""
    names = [t for t in getattr(tokenizer, "all_special_tokens", []) if t and len(t) > 1]
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    names += [t.content for t in decoder.values() if getattr(t, "special", False) and len(t.content) > 1]
    cuts = sorted({i + len(n) - 1 for n in set(names) for i in _find_all(text, n)})
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return [p for p in pieces if p]


def _find_all(text: str, needle: str) -> list[int]:
    out, at = [], text.find(needle)
    while at >= 0:
        out.append(at)
        at = text.find(needle, at + 1)
    return out


def tool_turn_ids(tokenizer, results: list[str], render: Callable[[list[str]], str]) -> list[int]:
    """The tokens of a tool turn: `render(results)` (the template's text around the results) with the template's
    pieces encoded as usual and every result encoded as plain text (`encode_text`)."""
    holes = [_HOLE.format(i) for i in range(len(results))]
    text = render(holes)
    ids: list[int] = []
    for i, hole in enumerate(holes):
        before, found, text = text.partition(hole)
        if not found:  # a template that changed the content: no safe split, every result as plain text
            return encode_text(tokenizer, render(results))
        ids += tokenizer.encode(before, add_special_tokens=False) if before else []
        ids += encode_text(tokenizer, results[i])
    return ids + (tokenizer.encode(text, add_special_tokens=False) if text else [])
