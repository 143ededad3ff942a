"""verl's launch lines: Hydra overrides and nested YAML through the one table in `table`.

Two modes, as the two entry points need:

* ``python -m ppokit.main_ppo key=value ...``: verl's documented defaults, then the overrides; the whole
  resulting verl config is translated (so ``data.train_batch_size`` is 1024 unless given, as in verl).
* ``python run_ppo.py [CONFIG] key=value ...``: PaddleNLP/ppokit defaults and the file; only the verl keys
  given are translated (a converter that needs a partner key uses it only when that key is given too).

Plain keys without a dot (``max_steps=3``) are ppokit's own keys in both modes and apply last.
"""

from __future__ import annotations

import difflib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from ppokit.args.errors import ConfigError

from .convert import SUBSTITUTE_ENGINES, verl_bool
from .eras import VERSIONS
from .hydra import MISSING, Override, flatten, looks_like_override, parse_override, resolve_interpolations
from .table import (
    ERAS,
    FREE_FORM,
    INTERPOLATED,
    LAUNCH_KEYS,
    MISSPELLED_PREFIXES,
    TABLE,
    Ctx,
    is_known,
    removed_in,
    resolve,
)

logger = logging.getLogger("ppokit")
VERL_ROOTS = tuple(dict.fromkeys(["data", "actor_rollout_ref", "critic", "reward_model", "custom_reward_function",
                                  "algorithm", "trainer", "ray_init", "hydra", *(k.split(".")[0] for k in ERAS)]))
BUILTIN_CONFIGS = ("ppo_trainer", "ppo_megatron_trainer")
"""verl's own --config-name values: its composed defaults (ppokit's table), not a file of the user's."""


@dataclass
class VerlTranslation:
    """ppokit values from verl keys, with what each given verl key did."""

    values: dict[str, Any]  # verl-derived ppokit values (applied before `plain`)
    plain: dict[str, Any]  # ppokit keys given as key=value (applied last)
    drop: list[str]  # ppokit keys removed with ~key
    mapping: dict[str, dict[str, Any]]  # given verl key -> {"value", "sets" | "no_effect", "note"}
    notes: list[str] = field(default_factory=list)
    world_size: int = 1
    cfg: dict[str, Any] = field(default_factory=dict)  # the resolved verl config (main_ppo mode: all keys)


def verl_defaults() -> dict[str, Any]:
    """verl's documented defaults as {dotted.key: value} (interpolations unresolved)."""
    return {key: INTERPOLATED.get(key, entry.default) for key, entry in TABLE.items()}


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(``--key value`` tokens, ``key=value``/``+key``/``~key`` tokens); a token right after ``--key`` of a
    non-boolean argument is that option's value (``--eos_token a=b``), whatever it looks like."""
    dashed, hydra = [], []
    for i, token in enumerate(argv):
        is_value = i > 0 and _takes_value(argv[i - 1])
        (hydra if looks_like_override(token) and not is_value else dashed).append(token)
    return dashed, hydra


def _takes_value(token: str) -> bool:
    """True for '--key' (no '=') naming a non-boolean argument: the next token is its value."""
    from ppokit.args.arguments import Arguments
    from ppokit.args.fieldinfo import non_none

    if not token.startswith("--") or "=" in token:
        return False
    field = Arguments.model_fields.get(token[2:])
    return field is not None and bool not in non_none(field.annotation)


def is_verl_key(key: str) -> bool:
    return "." in key or key in VERL_ROOTS


def canonical_key(key: str, notes: list[str], added: bool = False) -> str:
    """The table's spelling of ``key``: a known misspelled prefix is fixed with a warning; an unknown key
    raises ConfigError naming the closest verl key, unless ``added`` (Hydra's ``+key``: a key of the user's
    own, which verl accepts and does not read; noted here)."""
    for wrong, right in MISSPELLED_PREFIXES.items():
        if key.startswith(wrong):
            fixed = right + key[len(wrong):]
            notes.append(f"'{key}' is read as '{fixed}' (the '{wrong}' spelling comes from a widely copied guide; "
                         f"verl itself would refuse it).")
            key = fixed
    if is_known(key) or key.startswith("hydra."):
        return key
    match = difflib.get_close_matches(key, sorted({*TABLE, *ERAS}), n=1, cutoff=0.6)
    if added:
        hint = f" (did you mean {match[0]}?)" if match else ""
        notes.append(f"'+{key}' adds a key no verl release has{hint}; verl does not read it, and it has no effect here.")
        return key
    hint = f"; did you mean {match[0]}?" if match else "; docs/verl.md lists every verl key ppokit reads."
    raise ConfigError(f"command line: unknown verl key '{key}'{hint}")


def apply_overrides(cfg: dict[str, Any], overrides: list[Override], notes: list[str]) -> tuple[dict, list[str]]:
    """Apply verl overrides to a flat config (Hydra's rules for +, ++ and ~); returns (config, given keys)."""
    out, given = dict(cfg), []
    for o in overrides:
        key = canonical_key(o.key, notes, added=o.op in ("add", "force"))
        if o.op == "remove":
            if key not in out and key not in TABLE:  # a known key outside the table: nothing to remove
                continue
            if key not in out:
                raise ConfigError(f"command line: '{o.token}': there is no '{key}' to remove.")
            if o.value is not MISSING and out[key] != o.value:
                raise ConfigError(f"command line: '{o.token}': '{key}' is {out[key]!r}, not {o.value!r}.")
            out[key] = verl_defaults().get(key)
        elif o.op == "add" and key in out and set(ERAS.get(key, ())) == set(VERSIONS):
            raise ConfigError(f"command line: '{o.token}': '{key}' already exists; write {o.token[1:]} to change it.")
        elif o.op == "add" and key in out:  # a key some releases lack: their lines add it
            notes.append(f"'{o.token}': '{key}' is in verl's config from {ERAS[key][0]} on (read as a plain set)."
                         if key in ERAS else f"'{o.token}': read as a plain set.")
            out[key] = o.value
        else:
            out[key] = o.value
        given.append(key)
    return out, list(dict.fromkeys(given))


def parse_tokens(tokens: list[str]) -> tuple[list[Override], dict[str, Any], list[str]]:
    """Split override tokens into (verl overrides, plain ppokit values, ppokit keys to drop)."""
    verl, plain, drop = [], {}, []
    for token in tokens:
        o = parse_override(token)
        if is_verl_key(o.key):
            verl.append(o)
        elif o.op == "remove":
            drop.append(o.key)
            plain.pop(o.key, None)
        else:
            plain[o.key] = None if o.value is MISSING else o.value
    return verl, plain, drop


def planned_world_size(cfg: dict[str, Any]) -> int:
    """The launcher's WORLD_SIZE when set, else trainer.nnodes x trainer.n_gpus_per_node (1 when absent)."""
    if os.environ.get("WORLD_SIZE"):
        return max(int(os.environ["WORLD_SIZE"]), 1)
    nodes, gpus = cfg.get("trainer.nnodes"), cfg.get("trainer.n_gpus_per_node")
    for key, value in (("trainer.nnodes", nodes), ("trainer.n_gpus_per_node", gpus)):
        if value is not None and not (isinstance(value, int) or str(value).isdigit()):
            raise ConfigError(f"{key}={value!r} is not a whole number of {'nodes' if 'nnodes' in key else 'GPUs'}.")
    return max(int(nodes or 1) * int(gpus or 1), 1) if (nodes is not None or gpus is not None) else 1


def translate_verl(tokens: list[str], base: dict[str, Any] | None = None, world: int | None = None) -> VerlTranslation:
    """Translate override tokens. ``base`` is a flat verl config to start from (main_ppo mode: verl's
    defaults, or a YAML file over them); None means run_ppo.py mode (only the given keys). ``world``: the
    data-parallel size global micro-batches are divided by (None: `planned_world_size`)."""
    notes: list[str] = []
    verl, plain, drop = parse_tokens(tokens)
    cfg, given = apply_overrides(base or {}, verl, notes)
    cfg = _booleans(resolve_interpolations(cfg))
    world = planned_world_size(cfg) if world is None else world
    ctx = Ctx(cfg, world)
    values: dict[str, Any] = {}
    mapping: dict[str, dict[str, Any]] = {}
    keys = list(cfg) if base is not None else given
    for key in keys:
        entry = TABLE.get(key)
        if entry is None:  # a rule's key, free-form or hydra.* key (given, or set by a YAML file)
            line = _rule_line(key, cfg[key])
            if key in given:
                mapping[key] = line
            continue
        if cfg[key] == "???" and (entry.target or entry.convert):
            raise ConfigError(f"{key}=???: a mandatory value in verl's config (OmegaConf's ???); give {key}=... "
                              "on the command line or in the file.")
        try:
            updates = entry.apply(cfg[key], ctx)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{key}={cfg[key]!r} is not valid: {exc}.") from None
        except ConfigError as exc:
            raise ConfigError(f"{key}: {exc}" if not str(exc).startswith(key) else str(exc)) from None
        values.update(updates)
        if key in given:
            mapping[key] = _mapping_line(key, cfg[key], updates, entry)
    notes += _no_effect_notes(mapping) + _semantic_notes(cfg, given)
    if base is None and any(key in LAUNCH_KEYS for key in given):
        notes.append("trainer.n_gpus_per_node/nnodes start no processes under run_ppo.py; use "
                     "`python -m ppokit.main_ppo ...` or `python -m ppokit.launch --nproc_per_node N run_ppo.py ...`.")
    return VerlTranslation(values, plain, drop, mapping, notes, world, cfg)


def _booleans(cfg: dict[str, Any]) -> dict[str, Any]:
    """Values of boolean verl keys as OmegaConf reads them (``use_kl_loss=0`` is false); anything else is refused."""
    return {k: verl_bool(k, v) if k in TABLE and isinstance(TABLE[k].default, bool) else v for k, v in cfg.items()}


def _rule_line(key: str, value: Any) -> dict[str, Any]:
    """The --print_config line of a key outside TABLE; a refused one with a value that asks for it stops here."""
    found = resolve(key)
    if found is None or found.rule is None:
        reason = found.reason if found else "verl/Hydra option ppokit does not read"
        return {"value": value, "no_effect": _with_era(key, reason)}
    found.rule.check(key, value)
    return {"value": value, "no_effect": _with_era(key, found.reason)}


def _with_era(key: str, reason: str) -> str:
    gone = removed_in(key)
    return f"{reason} (removed in verl {gone})" if gone else reason


def _semantic_notes(cfg: dict[str, Any], given: list[str]) -> list[str]:
    """Notes where a verl setting means something ppokit does differently."""
    out = []
    engine = cfg.get("actor_rollout_ref.rollout.name")
    if engine in SUBSTITUTE_ENGINES and "actor_rollout_ref.rollout.name" in given:
        out.append(f"actor_rollout_ref.rollout.name={engine}: ppokit has no {engine} engine; it rolls out "
                   "with vllm (the same sampling; hf when vllm is not installed).")
    freq = cfg.get("trainer.test_freq")
    if "data.val_files" in given and "trainer.test_freq" in cfg and str(freq).lstrip("-").isdigit() and int(freq) <= 0:
        out.append(f"data.val_files is not read: validation runs only when trainer.test_freq > 0 (it is {freq}; "
                   "ppokit does not validate before training).")
    estimator = cfg.get("algorithm.adv_estimator")
    in_reward = ("gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline")
    if cfg.get("algorithm.use_kl_in_reward") and estimator is not None and estimator not in in_reward:
        out.append(f"algorithm.use_kl_in_reward=True is ignored for adv_estimator={estimator}: ppokit puts KL "
                   "into the reward only for gae (ppo) and reinforce_plus_plus(_baseline); use actor_rollout_ref.actor."
                   "use_kl_loss for a KL term.")
    return out


def _mapping_line(key: str, value: Any, updates: dict[str, Any], entry) -> dict[str, Any]:
    line: dict[str, Any] = {"value": value}
    if updates:
        line["sets"] = updates
    elif key in LAUNCH_KEYS:
        line["launch"] = entry.note
    elif entry.target is None:
        line["no_effect"] = _with_era(key, entry.note)
    else:
        line["sets"] = {}
    if entry.note and entry.target is not None:
        line["note"] = entry.note
    return line


def _no_effect_notes(mapping: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for key, line in mapping.items():
        if "no_effect" in line and (key not in TABLE or line["value"] != TABLE[key].default):
            out.append(f"verl key {key}={line['value']!r} has no effect here: {line['no_effect']}.")
    return out


def read_verl_yaml(config_path: str, config_name: str) -> dict[str, Any]:
    """A nested verl YAML (``--config-path DIR --config-name NAME``) as a flat config over verl's defaults."""
    from ppokit.args.loader import read_config_file

    name = config_name if config_name.endswith((".yaml", ".yml")) else config_name + ".yaml"
    path = os.path.join(config_path, name)
    if not os.path.isfile(path) and name.rsplit(".", 1)[0] in BUILTIN_CONFIGS:
        logger.info(f"--config-name {config_name}: verl's own composed config; its keys resolve through ppokit's "
                    "verl table (Megatron options have no effect: ppokit trains with DeepSpeed ZeRO).")
        return verl_defaults()
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such verl config (from --config-path {config_path} --config-name "
                          f"{config_name}).")
    tree = read_config_file(path)
    tree.pop("defaults", None)  # Hydra's composition list: verl's own defaults are already the base
    flat = flatten(tree, leaves=FREE_FORM)
    cfg = verl_defaults()
    notes: list[str] = []
    unknown: list[str] = []
    for key, value in flat.items():
        if key.startswith("hydra."):
            continue
        try:
            cfg[canonical_key(key, notes)] = value
        except ConfigError as exc:
            unknown.append(str(exc).replace("command line: unknown verl key", f"{path}: unknown key"))
    if unknown:
        raise ConfigError("\n".join(unknown))
    for note in notes:
        logger.info(note)
    return cfg


def describe_verl_key(key: str) -> tuple[str, str | None]:
    """('verl key: default, what it sets, note', the ppokit key it sets or None); ConfigError with a hint."""
    import json

    notes: list[str] = []
    key = canonical_key(key, notes)
    found = resolve(key)
    releases = f"; in verl {_span(key)}" if key in ERAS else ""
    if found is None or found.entry is None:
        kind = "refused when it asks for the feature" if found and found.kind == "refused" else "no effect in ppokit"
        reason = _with_era(key, found.reason) if found else "a verl/Hydra option ppokit does not read"
        return f"{key}: verl key; {kind} ({reason}){releases}.", None
    entry = found.entry
    what = f"sets {entry.target}" if entry.target else ("refused unless at its default" if entry.refuse
                                                        else "no effect in ppokit")
    note = f" ({_with_era(key, entry.note)})" if entry.note else ""
    return f"{key}: verl key, verl default {json.dumps(entry.default)}; {what}{note}{releases}.", entry.target


def _span(key: str) -> str:
    held = ERAS.get(key, ())
    if not held:
        return "ppokit (a + key)" if key in TABLE else ""
    return held[0] if len(held) == 1 else f"{held[0]}–{held[-1]}"


def kind_counts(keys) -> dict[str, int]:
    """{kind: how many of ``keys`` resolve to it}."""
    out = {"mapped": 0, "no_effect": 0, "refused": 0}
    for key in keys:
        found = resolve(key)
        out[found.kind if found else "unknown"] = out.get(found.kind if found else "unknown", 0) + 1
    return out


def _what(key: str) -> tuple[str, str]:
    found = resolve(key)
    if found.kind == "mapped":
        return "mapped", f"`{found.entry.target}`" + (f" ({found.entry.note})" if found.entry.note else "") \
            if found.entry.target else found.entry.note
    return found.kind.replace("_", " "), found.reason


def markdown_table() -> str:
    """The generated part of docs/verl.md: the keys ppokit maps, the refusals, the no-effect rules, then every
    leaf by the verl release that introduced it (``python -m ppokit.args verl-table``)."""
    import json

    from .table import RULES, VERSIONS

    total = kind_counts(ERAS)
    lines = [f"{len(ERAS)} leaves over verl {VERSIONS[0]} … {VERSIONS[-1]} (the composed ppo_trainer and "
             f"ppo_megatron_trainer of each release): {total['mapped']} mapped, {total['no_effect']} accepted with no "
             f"effect, {total['refused']} refused.", "", "### Mapped", "",
             "| verl key | verl default | ppokit key | note | releases |", "|---|---|---|---|---|"]
    for key, entry in TABLE.items():
        if resolve(key).kind == "mapped":
            target = f"`{entry.target}`" if entry.target else "launch plan"
            lines.append(f"| `{key}` | `{json.dumps(entry.default)}` | {target} | {entry.note} | {_span(key)} |")
    lines += ["", "### Refused (a value that asks for the feature stops with the sentence)", "",
              "| verl key or pattern | sentence |", "|---|---|"]
    lines += [f"| `{k}` | {e.refuse} |" for k, e in TABLE.items() if e.refuse]
    lines += [f"| `{r.pattern}` | {r.reason} |" for r in RULES if r.refuse]
    lines += ["", "### Accepted, no effect here: the rules", "", "| pattern | why | leaves |", "|---|---|---|"]
    for rule in RULES:
        if not rule.refuse:
            count = sum(1 for k in ERAS if resolve(k).rule is rule)
            lines.append(f"| `{rule.pattern}` | {rule.reason} | {count} |")
    lines += ["", "### By release", "", "Each leaf under the release that introduced it; a release's removals "
              "are still accepted (a note names the release that removed them).", ""]
    for i, version in enumerate(VERSIONS):
        here = [k for k, held in ERAS.items() if version in held]
        new = [k for k in here if ERAS[k][0] == version]
        gone = [k for k, held in ERAS.items() if i and VERSIONS[i - 1] in held and version not in held]
        counts = kind_counts(here)
        lines += [f"#### verl {version}", "", f"{len(here)} leaves: {counts['mapped']} mapped, "
                  f"{counts['no_effect']} no effect, {counts['refused']} refused; {len(new)} new, {len(gone)} removed.",
                  ""]
        if new:
            lines += ["| new key | kind | ppokit key or why |", "|---|---|---|"]
            lines += ["| `{}` | {} | {} |".format(k, *_what(k)) for k in sorted(new)]
        if gone:
            lines += ["", "Removed: " + ", ".join(f"`{k}`" for k in sorted(gone)) + "."]
        lines.append("")
    return "\n".join(lines).strip() + "\n"
