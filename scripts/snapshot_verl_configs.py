"""Snapshot verl's composed trainer configs and its example launch lines into tests/fixtures/verl/.

    python scripts/snapshot_verl_configs.py [--repo GIT_DIR] [--out tests/fixtures/verl] [--versions v0.5.0 ...]
    python scripts/snapshot_verl_configs.py --eras    # also rewrite ppokit/dialects/verl/eras.py from the fixtures

For each release: ``ppo_trainer.yaml`` and ``ppo_megatron_trainer.yaml`` (verl's composed tree, comments
dropped: ``_generated_*.yaml`` from v0.5 on, the single file before) and ``launch_lines.json`` (the
``key=value`` tokens of every ``python3 -m verl.trainer.main_ppo`` line under ``examples/``, shell variables
set in the script substituted, the ones it reads from its environment given stand-ins; an example ``--config-name`` YAML is written out as its leading ``++key=value`` tokens).
Only the tokens are kept, not the scripts. A new verl release: add its tag to VERSIONS, rerun, and
``tests/verl/test_verl_eras.py`` shows every leaf the table does not resolve yet.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys

import yaml

REPO = "/work/.mirror/volcengine+verl/repo"
VERSIONS = ("v0.2", "v0.3.0.post1", "v0.4.0", "v0.4.1", "v0.5.0", "v0.6.1", "v0.7.0", "HEAD")
"""Releases users still run, oldest first (HEAD: verl's main branch when the snapshot was taken)."""
BUILTIN = ("ppo_trainer", "ppo_megatron_trainer")
_ASSIGN = re.compile(r"^\s*(?:export\s+|local\s+|readonly\s+)?([A-Za-z_]\w*)=(.*)$")
_SHELL_OPS = ("|", "||", "&&", ";", "&", ">", ">>", "2>&1", "1>&2")


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def dir_name(version: str) -> str:
    return "head" if version == "HEAD" else version


def composed(repo: str, version: str, name: str) -> dict:
    """verl's composed trainer config ``name`` at ``version`` (comments dropped)."""
    for path in (f"verl/trainer/config/_generated_{name}.yaml", f"verl/trainer/config/{name}.yaml"):
        try:
            tree = yaml.safe_load(git(repo, "show", f"{version}:{path}"))
        except subprocess.CalledProcessError:
            continue
        if "defaults" in tree and not path.split("/")[-1].startswith("_generated"):
            raise SystemExit(f"{version}:{path} composes other files and has no _generated_ twin")
        return tree
    raise SystemExit(f"{version}: no {name}.yaml")


# ------------------------------------------------------------------------------------ shell lines
def _expand(text: str, env: dict[str, str]) -> str:
    """``$VAR``, ``${VAR}``, ``${VAR:-default}`` (nested) and ``$((a + b))`` with the script's variables;
    a variable the script does not set stays as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$((", i):
            end = _closing(text, i + 1) - 1
            if end > 0 and text[end] == ")":
                expr = _expand(text[i + 3:end], env)
                expr = re.sub(r"\b([A-Za-z_]\w*)\b", lambda v: env.get(v.group(1), v.group(1)), expr)
                ok = re.fullmatch(r"[\d\s+\-*/()%]+", expr)
                out.append(str(eval(expr.replace("/", "//"), {}, {})) if ok else text[i:end + 2])  # noqa: S307
                i = end + 2
                continue
        if text.startswith("${", i):
            j = _closing(text, i + 1) + 1
            body = text[i + 2:j - 1]
            name, sep, default = re.match(r"([A-Za-z_]\w*|\d+)(:?[-=]|)(.*)", body, re.S).groups() \
                if re.match(r"[A-Za-z_\d]", body) else (body, "", "")
            if name in env and not (sep.startswith(":") and env[name] == ""):
                out.append(env[name])
            elif sep:
                out.append(_expand(default.strip('"'), env))
            else:
                out.append(text[i:j])
            i = j
            continue
        match = re.match(r"\$([A-Za-z_]\w*)", text[i:])
        if match:
            out.append(env.get(match.group(1), match.group(0)))
            i += len(match.group(0))
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start`` (len(text) when unbalanced)."""
    pairs = {"(": ")", "{": "}"}
    stack = [pairs[text[start]]]
    for j in range(start + 1, len(text)):
        if text[j] in pairs:
            stack.append(pairs[text[j]])
        elif text[j] == stack[-1]:
            stack.pop()
            if not stack:
                return j
    return len(text)


_COUNTS = re.compile(r"NODES|NNODES|NUM|GPUS|WORKER", re.IGNORECASE)


def _stand_ins(words: list[str]) -> list[str]:
    """Variables the script reads from its environment (or from a command) become stand-ins, so the line
    can be read: 1 for node/GPU counts, else the variable's name."""
    def one(m):
        name = m.group(1) or m.group(2)
        return "1" if _COUNTS.search(name) else name.lower()
    return [re.sub(r"\$\{([A-Za-z_]\w*)[^}]*\}|\$([A-Za-z_]\w*)", one, w) for w in words]


def _logical_lines(text: str) -> list[str]:
    return text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines()


def _assignments(lines: list[str], env: dict[str, str]) -> dict[str, str]:
    """Variables the script sets (the last assignment wins; command substitutions skipped)."""
    env = dict(env)
    for line in lines:
        match = _ASSIGN.match(line)
        if not match or "$(" in match.group(2).replace("$((", ""):
            continue
        try:
            words = shlex.split(_expand(match.group(2), env), comments=True)
        except ValueError:
            continue
        if len(words) <= 1:
            env[match.group(1)] = words[0] if words else ""
    return env


def _config_tokens(repo: str, version: str, script: str, name: str, path: str | None) -> tuple[list[str], str]:
    """An example's own ``--config-name`` YAML as override tokens (built-in verl configs: none)."""
    from ppokit.dialects.verl.hydra import flatten
    from ppokit.dialects.verl.rewrite import hydra_literal

    stem = name[:-5] if name.endswith(".yaml") else name
    if stem in BUILTIN:
        return [], stem
    files = git(repo, "ls-tree", "-r", "--name-only", version, "examples").split()
    here = os.path.dirname(script)
    found = [f for f in files if os.path.basename(f) == stem + ".yaml"]
    found.sort(key=lambda f: (not f.startswith(here), f))
    if not found:
        raise SystemExit(f"{version}:{script}: --config-name {name} not found under examples/")
    tree = yaml.safe_load(git(repo, "show", f"{version}:{found[0]}"))
    tokens: list[str] = []
    for parent in tree.pop("defaults", []) or []:
        parent = parent if isinstance(parent, str) else None
        if parent and parent not in ("_self_", *BUILTIN):
            tokens += _config_tokens(repo, version, found[0], parent, path)[0]
    tree.pop("hydra", None)
    for key, value in flatten(tree).items():
        tokens.append(f"++{key}={hydra_literal(value)}")  # a YAML merge: sets, or adds the example's own keys
    return tokens, stem


def _command_words(line: str) -> list[str] | None:
    if "verl.trainer.main_ppo" not in line or line.lstrip().startswith("#"):
        return None
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if "verl.trainer.main_ppo" not in words:
        return None
    words = words[words.index("verl.trainer.main_ppo") + 1:]
    for i, word in enumerate(words):
        if word in _SHELL_OPS or word.startswith((">", "2>")):
            return words[:i]
    return words


def _arrays(lines: list[str], env: dict[str, str]) -> dict[str, list[str]]:
    """Bash arrays the script sets (``NAME=(`` one item a line ``)``), items expanded."""
    arrays: dict[str, list[str]] = {}
    name = None
    for line in lines:
        match = re.match(r"^\s*([A-Za-z_]\w*)=\((.*)$", line)
        if match:
            name, rest = match.group(1), match.group(2)
            arrays[name] = []
            line = rest
        if name is None:
            continue
        done = line.rstrip().endswith(")")
        body = line.rstrip()[:-1] if done else line
        try:
            arrays[name] += shlex.split(_expand(body, env), comments=True)
        except ValueError:
            pass
        if done:
            name = None
    return arrays


def _with_arrays(line: str, arrays: dict[str, list[str]]) -> str:
    for name, items in arrays.items():
        joined = " ".join(shlex.quote(i) for i in items)
        line = line.replace(f'"${{{name}[@]}}"', joined).replace(f"${{{name}[@]}}", joined)
    return line


def script_lines(repo: str, version: str, script: str) -> list[dict]:
    """Each main_ppo command of one example script as {script, config_name, tokens}."""
    text = git(repo, "show", f"{version}:{script}")
    lines = _logical_lines(text)
    env = _assignments(lines, {"HOME": "~"})
    arrays = _arrays(lines, env)
    out = []
    for line in lines:
        words = _command_words(_expand(_with_arrays(line, arrays), env))
        if words is None:
            continue
        words = _stand_ins(words)
        tokens, name, path, skipped = [], "ppo_trainer", None, []
        it = iter(words)
        for word in it:
            flag, eq, value = word.partition("=")
            if flag in ("--config-path", "-cp", "--config-name", "-cn"):
                value = value if eq else next(it, "")
                path, name = (value, name) if flag in ("--config-path", "-cp") else (path, value)
            elif "=" in word and not word.startswith("-") and "$" not in word.split("=", 1)[0]:
                tokens.append(word)
            elif word.startswith("~") or word.startswith("+"):
                tokens.append(word)
            else:
                skipped.append(word)
        head, config = _config_tokens(repo, version, script, name, path)
        entry = {"script": script, "config_name": config if config in BUILTIN else "ppo_trainer",
                 "tokens": head + tokens}
        if config not in BUILTIN:
            entry["example_config"] = config
        out.append(entry)
    return out


def launch_lines(repo: str, version: str) -> list[dict]:
    files = git(repo, "ls-tree", "-r", "--name-only", version, "examples").split()
    out = []
    for script in sorted(f for f in files if f.endswith(".sh")):
        out += script_lines(repo, version, script)
    return out


# ---------------------------------------------------------------------------------------- writing
def write_version(repo: str, out: str, version: str, previous: list[dict]) -> list[dict]:
    """Write one release's fixtures; returns its launch lines (all of them, for the next release's diff)."""
    folder = os.path.join(out, dir_name(version))
    os.makedirs(folder, exist_ok=True)
    commit = git(repo, "rev-parse", f"{version}^{{commit}}").strip()
    for name in BUILTIN:
        tree = composed(repo, version, name)
        with open(os.path.join(folder, f"{name}.yaml"), "w", encoding="utf-8") as f:
            f.write(f"# verl {version} ({commit[:12]}): verl/trainer/config/{name}, composed; written by "
                    "scripts/snapshot_verl_configs.py\n")
            yaml.safe_dump(tree, f, sort_keys=False, default_flow_style=None, width=120)
    lines = launch_lines(repo, version)
    seen = {json.dumps(line, sort_keys=True) for line in previous}
    new = [line for line in lines if json.dumps(line, sort_keys=True) not in seen]
    same = sorted({line["script"] for line in lines} - {line["script"] for line in new})
    with open(os.path.join(folder, "launch_lines.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"version": version, "commit": commit, "lines_total": len(lines),
                            "unchanged_from_previous": same})[:-1] + ', "lines": [\n')
        f.write(",\n".join(json.dumps(line) for line in new) + "\n]}\n")
    print(f"{version}: {len(lines)} launch lines, {len(new)} new or changed", file=sys.stderr)
    return lines


def fixture_leaves(out: str) -> dict[str, list[str]]:
    """{leaf: [versions holding it]} over both trainer configs of every snapshot (free-form mappings whole)."""
    from ppokit.dialects.verl.hydra import flatten
    from ppokit.dialects.verl.table import FREE_FORM

    leaves: dict[str, list[str]] = {}
    for version in map(dir_name, VERSIONS):
        for name in BUILTIN:
            with open(os.path.join(out, version, f"{name}.yaml"), encoding="utf-8") as f:
                tree = yaml.safe_load(f)
            for key in flatten(tree, leaves=FREE_FORM):
                if version not in leaves.setdefault(key, []):
                    leaves[key].append(version)
    return leaves


def eras_module(out: str) -> str:
    """The text of ppokit/dialects/verl/eras.py: each leaf with the snapshots holding it (a bit mask)."""
    names = [dir_name(v) for v in VERSIONS]
    by_parent: dict[str, list[str]] = {}
    for key, versions in sorted(fixture_leaves(out).items()):
        parent, _, leaf = key.rpartition(".")
        mask = sum(1 << names.index(v) for v in versions)
        by_parent.setdefault(parent, []).append(leaf if mask == (1 << len(names)) - 1 else f"{leaf}@{mask:x}")
    rows = []
    for parent, leaves in by_parent.items():
        row = f"{parent}:"
        for leaf in leaves:
            if len(row) + len(leaf) > 118:
                rows.append(row)
                row = f"{parent}:"
            row += f" {leaf}"
        rows.append(row)
    body = "\n".join(rows)
    return f'''"""Every leaf of verl's trainer configs (ppo_trainer, ppo_megatron_trainer) in the snapshotted releases.

Generated by scripts/snapshot_verl_configs.py from tests/fixtures/verl; do not edit. One row per parent
key: its leaves, each with ``@MASK`` (hex; bit i = present in VERSIONS[i]) unless present in all.
"""

VERSIONS = {tuple(names)!r}

_PACKED = """
{body}
"""


def leaves() -> dict[str, tuple[str, ...]]:
    """{{dotted leaf: the snapshotted versions holding it}}."""
    out: dict[str, tuple[str, ...]] = {{}}
    for row in _PACKED.strip().splitlines():
        parent, _, names = row.partition(":")
        for name in names.split():
            leaf, _, mask = name.partition("@")
            bits = int(mask, 16) if mask else (1 << len(VERSIONS)) - 1
            key = f"{{parent}}.{{leaf}}" if parent else leaf
            out[key] = tuple(v for i, v in enumerate(VERSIONS) if bits >> i & 1)
    return out
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=REPO)
    parser.add_argument("--out", default="tests/fixtures/verl")
    sys.path.insert(0, os.getcwd())
    parser.add_argument("--eras-only", action="store_true", help="only rewrite ppokit/dialects/verl/eras.py")
    opts = parser.parse_args(argv)
    previous: list[dict] = []
    for version in () if opts.eras_only else VERSIONS:
        previous = write_version(opts.repo, opts.out, version, previous)
    text = eras_module(opts.out)  # before opening: the table imports the module being rewritten
    with open("ppokit/dialects/verl/eras.py", "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
