"""``python -m ppokit.args explain KEY | list | print CONFIG [--key value ...] | translate SRC --to verl|paddle``."""

from __future__ import annotations

import sys

from .arguments import Arguments
from .cli import explain, parse_cli
from .errors import ConfigError

USAGE = """usage: python -m ppokit.args explain KEY      describe a key (type, default, aliases)
       python -m ppokit.args list             list every key with its description
       python -m ppokit.args print CONFIG [--key value ...]   print the resolved arguments
       python -m ppokit.args translate FILE_OR_LINE --to verl|paddle
                                              a PaddleNLP JSON as a verl line, or a verl line/YAML as JSON
       python -m ppokit.args verl-table       the verl key table as Markdown (docs/verl.md)"""


def key_list() -> str:
    """Every key with its type and description, by section (model, data, algorithm, batch, lengths, rewards, tools,
    run, then the others by name); the keys accepted for PaddleNLP compatibility with no effect last, names only."""
    from .effect import SECTIONS, section_of
    from .fieldinfo import type_name
    from .translate import IGNORED

    fields = Arguments.model_fields
    lines, order = [], [name for name, _ in SECTIONS] + ["other"]
    for section in order:
        keys = [k for k in (dict(SECTIONS).get(section) or sorted(fields)) if k in fields and k not in IGNORED
                and section_of(k) == section]
        lines.append(f"## {section}")
        lines += [f"{k} ({type_name(fields[k].annotation)}): {fields[k].description}" for k in keys] + [""]
    lines.append("## accepted for PaddleNLP compatibility, no effect in ppokit (`explain KEY` says why)")
    lines.append(", ".join(sorted(IGNORED)))
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    """Run one subcommand; returns the exit status."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "explain" and len(rest) == 1:
        try:
            print(explain(rest[0]))
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if command == "list" and not rest:
        print(key_list(), end="")
        return 0
    if command == "translate" and len(rest) == 3 and rest[1] == "--to":
        from .dialect import verl

        try:
            print(verl().translate(rest[0], rest[2]))
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if command == "verl-table" and not rest:
        from .dialect import verl

        print(verl().markdown_table(), end="")
        return 0
    if command == "print" and rest:
        parse_cli([*rest, "--print_config"])
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
