"""python -m ppokit.data {prepare,generate,check} — see docs/data.md."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter

from ppokit.args import Arguments
from ppokit.data.errors import DataError
from ppokit.data.prepare import LAYOUTS, prepare, write_jsonl
from ppokit.data.render import render_plain, render_prompt
from ppokit.data.specs import load_task_config, load_with_formats
from ppokit.errors import PpokitError
from ppokit.tasks import TASKS, TaskError, get

MAX_PROMPT_LEN = Arguments.model_fields["max_prompt_len"].default


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ppokit.data", description="Prepare, generate and check ppokit datasets."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write a built-in task's train/test files in PaddleNLP's layout")
    p.add_argument("name", choices=list(LAYOUTS))
    p.add_argument("--out", help="output folder (ppo-kk: '.', so ppo-kk/... lands here; others: 'data')")
    p.add_argument("--train-size", type=int)
    p.add_argument("--test-size", type=int)
    p.add_argument("--seed", type=int, default=0, help="shifts the fixed seeds (default 0)")
    g = sub.add_parser("generate", help="write N rows of a task; difficulty options as --key value")
    g.add_argument("task", help=f"one of: {', '.join(TASKS)}")
    g.add_argument("--n", type=int, required=True)
    g.add_argument("--out", required=True, help="output .jsonl file")
    g.add_argument("--seed", type=int, default=0)
    c = sub.add_parser(
        "check", help="validate a dataset file (or task config), print counts and the first prompt"
    )
    c.add_argument("file")
    c.add_argument(
        "--model", help="a Hugging Face model/tokenizer folder whose chat template renders the prompt"
    )
    c.add_argument("--max-prompt-len", type=int, default=MAX_PROMPT_LEN,
                   help=f"flag prompts longer than this many tokens, as training drops them (default {MAX_PROMPT_LEN}; "
                        "needs --model)")
    c.add_argument("--prompt-key", default="src")
    c.add_argument("--response-key", default="tgt")
    return parser


def _options(extra: list[str]) -> dict:
    """--key value pairs (values parsed as JSON when they are JSON, else kept as text)."""
    options = {}
    i = 0
    while i < len(extra):
        key = extra[i]
        if not key.startswith("--") or i + 1 >= len(extra):
            raise DataError(
                f"difficulty options must be --key value pairs; cannot read {' '.join(extra[i:])!r}"
            )
        value = extra[i + 1]
        try:
            options[key[2:].replace("-", "_")] = json.loads(value)
        except json.JSONDecodeError:
            options[key[2:].replace("-", "_")] = value
        i += 2
    return options


def _prepare(args, extra: list[str]) -> int:
    options = _options(extra)
    if options and args.name == "ppo-kk":
        raise DataError(
            "prepare ppo-kk takes no difficulty options: its layout fixes them (3–7 and 5 people)"
        )
    written = prepare(args.name, args.out, args.train_size, args.test_size, args.seed, options)
    for path in written:
        with open(path, encoding="utf-8") as fh:
            print(f"wrote {sum(1 for _ in fh)} rows to {path}")
    return 0


def _generate(args, extra: list[str]) -> int:
    try:
        rows = get(args.task).generate(args.n, args.seed, **_options(extra))
    except TaskError as err:
        raise DataError(str(err)) from err
    write_jsonl(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


def _tokenizer(model: str | None):
    if not model:
        return None, "without a chat template (give --model to use one)"
    if os.path.isdir(model) and any(
        os.path.exists(os.path.join(model, f)) for f in ("tokenizer.json", "tokenizer_config.json")
    ):
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(model)
        except Exception as err:  # a broken folder: report it like any other input problem
            raise DataError(f"--model {model}: cannot load its tokenizer: {err}") from err
        how = "with its chat template" if tok.chat_template else "plainly: the model has no chat template"
        return tok, f"{how} ({model})"
    print(
        f"note: --model {model} is not a Hugging Face tokenizer folder; showing the prompt without a chat template"
    )
    return None, "without a chat template"


def _is_task_config(path: str) -> bool:
    if not path.endswith(".json") or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and isinstance(data.get("tasks"), list)


def _check(args) -> int:
    if _is_task_config(args.file):
        records, formats = (
            load_task_config(args.file, args.prompt_key, args.response_key),
            Counter({"task config": 1}),
        )
    else:
        records, formats = load_with_formats(args.file, args.prompt_key, args.response_key)
    labelled = sum(r["label"] is not None for r in records)
    print(f"{args.file}: {len(records)} records, {labelled} with a reference answer")
    print("format: " + ", ".join(f"{kind} ({n})" for kind, n in formats.most_common()))
    tasks = Counter(r["task"] or "-" for r in records)
    print("tasks: " + ", ".join(f"{task} ({n})" for task, n in tasks.most_common()))
    tokenizer, how = _tokenizer(args.model)
    first = records[0]
    if tokenizer is None and first.get("messages"):
        text = render_plain(first["messages"])
    else:
        text = render_prompt(first, tokenizer)
    print(f"first prompt ({first['source']}), rendered {how}:\n{text}")
    if first["label"] is not None:
        print(f"its reference answer:\n{first['label']}")
    _warn_duplicates(records)
    return _flag_long_prompts(records, tokenizer, args.max_prompt_len)


def _warn_duplicates(records: list[dict]) -> None:
    """Rows with the same prompt and reference answer as an earlier row (training samples them twice as often)."""
    first_seen: dict[str, str] = {}
    repeats = []
    for r in records:
        key = json.dumps([r.get("messages") or r.get("prompt"), r["label"]], sort_keys=True, default=str)
        if key in first_seen:
            repeats.append(f"{r['source']} repeats {first_seen[key]}")
        else:
            first_seen[key] = r["source"]
    if repeats:
        shown = ", ".join(repeats[:10]) + (f" and {len(repeats) - 10} more" if len(repeats) > 10 else "")
        print(f"warning: {len(repeats)} duplicate rows: {shown}")


def _flag_long_prompts(records: list[dict], tokenizer, limit: int) -> int:
    """Each prompt over `limit` tokens as file:line (training drops them); exit status 1 when there are any."""
    if tokenizer is None or not limit or limit <= 0:
        print(f"prompt lengths not checked: give --model to count tokens against --max-prompt-len ({limit})")
        return 0
    from ppokit.data.render import prompt_token_ids

    lengths = [len(ids) for ids in prompt_token_ids(records, tokenizer)]
    long = [(r, n) for r, n in zip(records, lengths) if n > limit]
    for r, n in long[:20]:
        print(f"{r['source']}: the prompt has {n} tokens, more than max_prompt_len={limit}; training drops it")
    if long:
        print(f"{len(long)} of {len(records)} prompts are longer than max_prompt_len={limit} tokens (the longest has "
              f"{max(lengths)}); shorten them or raise max_prompt_len")
        return 1
    print(f"all {len(records)} prompts fit in max_prompt_len={limit} tokens (the longest has {max(lengths)})")
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args, extra = _parser().parse_known_args(argv)
    if extra and args.command == "check":
        print(f"error: unknown arguments for check: {' '.join(extra)}", file=sys.stderr)
        return 2
    try:
        return {"prepare": _prepare, "generate": _generate}.get(args.command, lambda a, _e: _check(a))(
            args, extra
        )
    except PpokitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
