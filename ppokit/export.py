"""Plain Hugging Face model folders from a run: `python -m ppokit.export CHECKPOINT_OR_OUTPUT_DIR --out DIR`.

The result is what `AutoModelForCausalLM.from_pretrained(DIR)` loads: safetensors weights under the
model's own names (LoRA adapters merged in, no adapter files), `config.json`, generation config and
tokenizer. The source may be
  - a checkpoint folder (`output_dir/checkpoint-<step>`): its `actor/` model;
  - an output_dir: its newest complete checkpoint, or else the final model saved in it;
  - any HF model folder, or a peft adapter folder (merged into the base model its config names).
Writing goes into a temporary folder renamed at the end, so `--out` is never left half written.

The checkpoints use the same helpers: `save_hf` (the merged HF copy), `save_adapter` / `load_weights`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
from pathlib import Path

import torch

logger = logging.getLogger("ppokit")

ADAPTER_CONFIG = "adapter_config.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ExportError(Exception):
    """The source cannot be exported (nothing to export, or the destination is in the way)."""


# ------------------------------------------------------------------ a trained module's weights in HF / peft folders


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def hf_state_dict(module) -> dict[str, torch.Tensor] | None:
    """`module`'s weights under plain HF names (LoRA merged) on the CPU, on rank 0; None elsewhere.

    Collective under ZeRO-3 (every rank must call it: the weights are gathered).
    """
    from ppokit.models.weights import gathered, hf_state

    with gathered(module):
        if _rank() != 0:
            return None
        state: dict[str, torch.Tensor] = {}
        # Tied weights (embeddings / LM head) stay one tensor. The sources are kept alive while copying, so
        # a temporary (a LoRA-merged weight) cannot free its memory for the next one to reuse its address.
        copies: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, tensor in hf_state(module):
            key = (tensor.data_ptr(), tensor.shape, tensor.dtype)
            if key not in copies or tensor.numel() == 0:
                copies[key] = (tensor, tensor.detach().to("cpu", copy=True).contiguous())
            state[name] = copies[key][1]
        return state


def save_hf(module, tokenizer, out: str | os.PathLike) -> None:
    """Write `module` (plain, peft LoRA or ZeRO-3 partitioned) as a plain HF folder at `out`.

    Call it on every rank; rank 0 writes. LoRA adapters are merged into the saved weights; the
    module itself is left unchanged.
    """
    from ppokit.models.weights import plain_model

    state = hf_state_dict(module)
    if state is None:
        return
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plain_model(module).save_pretrained(out, state_dict=state, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def partitioned(module) -> bool:
    return any(hasattr(p, "ds_id") for p in module.parameters())


def writable(module):
    """A context in which `module`'s (possibly ZeRO-3 partitioned) weights can be overwritten (rank 0's win)."""
    if not partitioned(module):
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=0)


def save_adapter(module, out: Path) -> None:
    """The LoRA adapters (peft layout); collective under ZeRO-3, rank 0 writes."""
    from ppokit.models.weights import gathered

    with gathered(module):
        if _rank() == 0:
            module.save_pretrained(str(out), safe_serialization=True)


def load_weights(module, folder: Path) -> None:
    """Load weights saved by `save_hf` (plain model) or `save_adapter` (LoRA) from `folder` into `module`."""
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ExportError(f"{folder} holds no *.safetensors weights; the checkpoint is damaged")
    state = {}
    for f in files:
        state.update(load_file(f))
    with writable(module):
        if hasattr(module, "peft_config"):
            from peft import set_peft_model_state_dict

            result = set_peft_model_state_dict(module, state)
            if result.unexpected_keys:
                raise ExportError(f"{folder}: adapter weights {result.unexpected_keys[:5]} do not fit this model")
            return
        missing, unexpected = module.load_state_dict(state, strict=False)
    tied = set(getattr(module, "_tied_weights_keys", None) or ()) | {"lm_head.weight"}
    real_missing = [k for k in missing if k not in tied]
    if real_missing or unexpected:
        raise ExportError(f"{folder}: weights do not fit this model (missing {real_missing[:5]}, "
                          f"unexpected {unexpected[:5]}); resume with the same actor_model_name_or_path")


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


def export(src: str | os.PathLike, out: str | os.PathLike, dtype: str | None = None, overwrite: bool = False) -> Path:
    """Write a plain HF model folder at `out` from `src` (see the module docstring); returns `out`."""
    if dtype is not None and dtype not in DTYPES:
        raise ExportError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    folder = resolve_source(src)
    out = Path(out)
    check_destination(folder, out, overwrite)
    model = load_for_export(folder, DTYPES.get(dtype) if dtype else None)
    tokenizer = load_tokenizer_for(folder)
    tmp = out.parent / f".tmp-export-{out.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    else:
        logger.warning("%s has no tokenizer; the exported folder holds only the model", folder)
    (tmp / EXPORT_MARKER).write_text(f"exported by ppokit from {folder.resolve()}\n")
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
