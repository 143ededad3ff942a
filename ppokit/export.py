"""Plain Hugging Face model folders from a run: `python -m ppokit.export CHECKPOINT_OR_OUTPUT_DIR --out DIR`.

The result is what `AutoModelForCausalLM.from_pretrained(DIR)` loads: safetensors weights under the
model's own names (LoRA adapters merged in, no adapter files), `config.json`, generation config and
tokenizer. The source may be
  - a checkpoint folder (`output_dir/checkpoint-<step>`): its `actor/` model;
  - an output_dir: its newest complete checkpoint, or else the final model saved in it;
  - any HF model folder, or a peft adapter folder (merged into the base model its config names).
Writing goes into a temporary folder renamed at the end, so `--out` is never left half written.

The checkpoints use the same weight helpers (`ppokit.models.folders`: `save_hf`, `save_adapter`, `load_weights`).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

import torch

from ppokit.checkpoint.safety import disk_full, is_disk_full, nonfinite_names
from ppokit.errors import PpokitError

logger = logging.getLogger("ppokit")

ADAPTER_CONFIG = "adapter_config.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ExportError(PpokitError):
    """The source cannot be exported (nothing to export, or the destination is in the way)."""


# ------------------------------------------------------------------ finding what to export


def _is_model_folder(path: Path) -> bool:
    has_weights = (path / "config.json").is_file() and any(path.glob("*.safetensors"))
    return has_weights or (path / ADAPTER_CONFIG).is_file()


def resolve_source(src: str | os.PathLike) -> Path:
    """The HF (or adapter) folder to export from a checkpoint, an output_dir or a model folder."""
    from ppokit.checkpoint import STATE_FILE, complete_checkpoints

    path = Path(src)
    if not path.is_dir():
        raise ExportError(f"{path} is not a folder; pass a checkpoint-<step> folder, an output_dir or a model folder")
    if (path / STATE_FILE).is_file():
        if not (path / "actor").is_dir():
            raise ExportError(f"{path} is a checkpoint without an actor/ model folder; it cannot be exported")
        return path / "actor"
    found = complete_checkpoints(path)
    if found:
        return found[-1] / "actor"
    if _is_model_folder(path):
        return path
    partial = sorted(p.name for p in path.glob("checkpoint-*")) + sorted(p.name for p in path.glob(".tmp-checkpoint-*"))
    hint = f" (only incomplete ones: {', '.join(partial)})" if partial else ""
    raise ExportError(f"{path} holds no complete checkpoint{hint} and no model; point at a checkpoint-<step> folder "
                      "or a folder with config.json and *.safetensors")


def load_for_export(folder: Path, dtype: torch.dtype | None):
    """The model in `folder` as a plain transformers model (a peft adapter is merged into its base)."""
    from transformers import AutoModelForCausalLM

    kwargs = {"dtype": dtype} if dtype is not None else {}
    if (folder / ADAPTER_CONFIG).is_file():
        from peft import PeftConfig, PeftModel

        base_path = PeftConfig.from_pretrained(str(folder)).base_model_name_or_path
        if not base_path or not Path(base_path).is_dir():
            raise ExportError(f"{folder} is a LoRA adapter whose base model {base_path!r} is not a local folder; "
                              "edit base_model_name_or_path in its adapter_config.json")
        base = AutoModelForCausalLM.from_pretrained(base_path, **kwargs)
        return PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    return AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)


def load_tokenizer_for(folder: Path):
    """The tokenizer saved with the model (or with an adapter's base model); None when there is none."""
    from transformers import AutoTokenizer

    candidates = [folder]
    if (folder / ADAPTER_CONFIG).is_file():
        from peft import PeftConfig

        candidates.append(Path(PeftConfig.from_pretrained(str(folder)).base_model_name_or_path))
    for path in candidates:
        if (path / "tokenizer_config.json").is_file():
            return AutoTokenizer.from_pretrained(str(path))
    return None


# ------------------------------------------------------------------ export


EXPORT_MARKER = ".ppokit-export"


def check_destination(source: Path, out: Path, overwrite: bool) -> None:
    """Refuse an --out that would lose data; `--overwrite` replaces only an earlier export (it has EXPORT_MARKER)."""
    src, dst = source.resolve(), out.resolve()
    if dst == src or dst in src.parents:
        raise ExportError(f"--out {out} is the source {source} or a folder above it; exporting there would delete the run")
    if src in dst.parents:
        raise ExportError(f"--out {out} is inside the source {source}; choose a folder outside it")
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not overwrite:
        raise ExportError(f"{out} already exists and is not empty; choose another --out or pass --overwrite")
    if not out.is_dir() or not (out / EXPORT_MARKER).is_file():
        raise ExportError(
            f"--overwrite replaces only an earlier ppokit export (a folder with {EXPORT_MARKER}); "
            f"{out} is not one, so it is left as it is: choose another --out or remove it yourself"
        )
    if any(out.rglob("checkpoint-*")) or any(out.rglob("trainer_state.json")):
        raise ExportError(f"--overwrite refused: {out} holds checkpoints of a run; choose another --out")


def write_export(model, tokenizer, folder: Path, tmp: Path) -> None:
    """The exported files into the temporary folder `tmp` (renamed onto --out by the caller)."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    else:
        logger.warning("%s has no tokenizer; the exported folder holds only the model", folder)
    (tmp / EXPORT_MARKER).write_text(f"exported by ppokit from {folder.resolve()}\n")


def export(src: str | os.PathLike, out: str | os.PathLike, dtype: str | None = None, overwrite: bool = False) -> Path:
    """Write a plain HF model folder at `out` from `src` (see the module docstring); returns `out`."""
    if dtype is not None and dtype not in DTYPES:
        raise ExportError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    folder = resolve_source(src)
    out = Path(out)
    check_destination(folder, out, overwrite)
    from ppokit.paths import WRITE_DIR, PathUse, path_problem

    problem = path_problem(PathUse("--out", str(out.absolute().parent), WRITE_DIR))  # before the model loads
    if problem:
        raise ExportError(f"{problem} (the export is written there, then renamed to {out.name})")
    model = load_for_export(folder, DTYPES.get(dtype) if dtype else None)
    bad = nonfinite_names(model)
    if bad:
        raise ExportError(f"{folder} holds NaN or inf weights ({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}: "
                          f"{len(bad)} tensors); nothing was exported: export an earlier checkpoint-<step>")
    tokenizer = load_tokenizer_for(folder)
    tmp = out.parent / f".tmp-export-{out.name}"
    try:
        write_export(model, tokenizer, folder, tmp)
    except Exception as exc:
        if is_disk_full(exc):
            raise ExportError(str(disk_full(f"the export {out.name}", out.parent, None, tmp,
                                            "Free space or choose another --out"))) from None
        raise
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    logger.info("exported %s to %s", folder, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ppokit.export",
        description="Write a plain Hugging Face model folder (LoRA merged) from a ppokit checkpoint or output_dir.",
    )
    parser.add_argument("source", help="a checkpoint-<step> folder, an output_dir (newest checkpoint) or a model folder")
    parser.add_argument("--out", required=True, help="the folder to write (must be new or empty)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="cast the weights (default: as saved)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out when it holds an earlier export (never a run or a checkpoint)")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="ppokit: %(message)s")
    try:
        out = export(ns.source, ns.out, dtype=ns.dtype, overwrite=ns.overwrite)
    except ExportError as exc:
        print(f"ppokit.export: {exc}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
