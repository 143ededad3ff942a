"""A verl line on the machine at hand: verl's GPU default fitted to the devices present, and errors in verl's keys.

verl's own default ``trainer.n_gpus_per_node=8`` names hardware the user never mentioned; when the line does not set
it, the launch plan uses the GPUs this machine has (one process on a CPU) and says so once. An error raised while a
verl line is translated or trained names ppokit's keys (``global_batch_size``, a file path); `in_verl_terms` adds
which verl key, with which value, set each of them, and whether that value is verl's default.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

GPUS_KEY = "trainer.n_gpus_per_node"


def devices_present() -> int:
    """CUDA GPUs this process may use, counted without importing torch (CUDA_VISIBLE_DEVICES, else the driver's
    device list)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip()]
        return 0 if not ids or ids[0].strip().startswith("-") else len(ids)
    found = glob.glob("/proc/driver/nvidia/gpus/*") or glob.glob("/dev/nvidia[0-9]*")
    return len(found)


def fit_gpus(base: dict[str, Any], tokens: list[str], default: Any) -> tuple[dict[str, Any], str | None]:
    """(config, note): verl's default trainer.n_gpus_per_node replaced by the devices present, when the line does
    not set the key, no launcher started us, and the machine has fewer than the default."""
    given = any(re.match(r"^[+~]*trainer\.n_gpus_per_node(=|$)", t) for t in tokens)
    if given or os.environ.get("WORLD_SIZE") or base.get(GPUS_KEY) != default:
        return base, None
    present = devices_present()
    if present >= int(default or 1):
        return base, None
    fitted = max(present, 1)
    where = "no GPU: one process trains on the CPU" if present == 0 else f"{present} GPU(s): {fitted} process(es)"
    note = (f"{GPUS_KEY}: verl's default is {default}, and this line does not set it; this machine has {where} "
            f"(give {GPUS_KEY}=N to choose).")
    return {**base, GPUS_KEY: fitted}, note


def _setters(translation) -> dict[str, list[str]]:
    """ppokit key -> the verl keys whose values set it in this translation."""
    from .table import TABLE, Ctx

    ctx = Ctx(translation.cfg, translation.world_size)
    out: dict[str, list[str]] = {}
    for key, value in translation.cfg.items():
        entry = TABLE.get(key)
        if entry is None:
            continue
        try:
            updates = entry.apply(value, ctx)
        except Exception:  # a key whose own error is the message being explained
            continue
        for target in updates:
            out.setdefault(target, []).append(key)
    return out


def _describe(key: str, translation) -> str:
    value = translation.cfg.get(key)
    origin = "" if key in translation.mapping else " (verl's default; your line does not set it)"
    return f"{key}={value!r}{origin}"


def in_verl_terms(message: str, translation) -> str:
    """`message` with a line naming the verl keys behind the ppokit keys, paths and ranks it mentions."""
    if translation is None or not translation.cfg:
        return message
    lines: list[str] = []
    for target, keys in sorted(_setters(translation).items()):
        if target not in translation.plain and re.search(rf"(?<![\w.]){re.escape(target)}(?![\w])", message):
            lines.append(f"{target} comes from " + ", ".join(_describe(k, translation) for k in keys[:3]))
    for key, value in translation.cfg.items():
        paths = value if isinstance(value, list) else [value]
        for path in paths:
            text = os.path.expanduser(str(path)) if isinstance(path, str) and len(path) > 3 else None
            if text and ("/" in text or "." in text) and text in message and not any(key in x for x in lines):
                lines.append(f"{text} is {_describe(key, translation)}")
    if re.search(r"\branks?\b", message):
        lines.append(f"the ranks are trainer.nnodes x {GPUS_KEY} = {translation.world_size}")
    return message if not lines else message.rstrip() + "\nIn verl's keys: " + "; ".join(lines) + "."
