"""`python -m ppokit.export`: a plain HF folder (LoRA merged) that from_pretrained loads and that generates."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys

import pytest
import torch
from checkpoint_helpers import REPO, assert_bitwise_equal, child_env, tail, tiny_config, weights
from transformers import AutoModelForCausalLM, AutoTokenizer

from ppokit.args import load_arguments
from ppokit.export import EXPORT_MARKER, ExportError, export
from ppokit.session import Session

INPUT = torch.tensor([[5, 40, 41, 42, 43, 7]])


def trained(model_path, folder, **extra) -> Session:
    s = Session(load_arguments(None, overrides=tiny_config(model_path, folder, max_steps=2, **extra)))
    s.train()
    return s


def logits(model) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=INPUT).logits


def assert_generates(folder) -> None:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    prompt = tokenizer("say a 3:", return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=5, min_new_tokens=5, do_sample=False,
                         pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] == prompt["input_ids"].shape[1] + 5
    assert isinstance(tokenizer.decode(out[0]), str)


def no_adapter_files(folder) -> None:
    names = [p.name for p in folder.iterdir()]
    assert not [n for n in names if n.startswith("adapter_")], names
    assert not [k for k in weights(folder) if "lora_" in k or "base_layer" in k]


def test_export_of_an_output_dir_loads_generates_and_equals_the_trained_model(tiny_model_dir, tmp_path):
    s = trained(tiny_model_dir, tmp_path)
    out = export(tmp_path / "out", tmp_path / "exported")
    assert_bitwise_equal(weights(tmp_path / "out" / "checkpoint-2" / "actor"), weights(out))
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(logits(loaded), logits(s.model))
    assert_generates(out)


def test_lora_run_exports_merged_weights_from_the_checkpoint_and_from_the_adapter(tiny_model_dir, tmp_path):
    s = trained(tiny_model_dir, tmp_path, lora_rank=4, ignore_save_lr_and_optim=True)
    merged = copy.deepcopy(s.model).merge_and_unload()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    assert (checkpoint / "actor_adapter" / "adapter_config.json").is_file()
    no_adapter_files(checkpoint / "actor")
    for source, name in ((checkpoint, "from_checkpoint"), (checkpoint / "actor_adapter", "from_adapter")):
        out = export(source, tmp_path / name)
        no_adapter_files(out)
        torch.testing.assert_close(logits(AutoModelForCausalLM.from_pretrained(out)), logits(merged),
                                   rtol=0, atol=1e-5)
        assert_generates(out)
    assert not torch.equal(logits(merged), logits(AutoModelForCausalLM.from_pretrained(tiny_model_dir)))


def test_cli_writes_the_folder_and_refuses_a_non_empty_destination(tiny_model_dir, tmp_path):
    trained(tiny_model_dir, tmp_path)
    out = tmp_path / "exported"

    def cli(*argv):
        return subprocess.run([sys.executable, "-m", "ppokit.export", *argv], cwd=REPO, env=child_env(),
                              capture_output=True, text=True, timeout=300)

    done = cli(str(tmp_path / "out" / "checkpoint-2"), "--out", str(out), "--dtype", "bfloat16")
    assert done.returncode == 0, tail(done)
    assert AutoModelForCausalLM.from_pretrained(out).dtype == torch.bfloat16
    done = cli(str(tmp_path / "out"), "--out", str(out))
    assert done.returncode == 2 and "not empty" in done.stderr and "--overwrite" in done.stderr, tail(done)


def test_export_explains_what_is_missing(tmp_path):
    with pytest.raises(ExportError, match="not a folder"):
        export(tmp_path / "nowhere", tmp_path / "x")
    (tmp_path / "run" / "checkpoint-8").mkdir(parents=True)  # an interrupted save: no trainer_state.json
    with pytest.raises(ExportError, match=r"only incomplete ones: checkpoint-8"):
        export(tmp_path / "run", tmp_path / "x")


def test_overwrite_never_deletes_a_run_its_parents_or_a_folder_that_is_not_an_export(tiny_model_dir, tmp_path):
    runs = tmp_path / "runs"
    run = runs / "a"
    shutil.copytree(tiny_model_dir, run / "final")
    (run / "checkpoint-2").mkdir()
    (run / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (runs / "b").mkdir()
    (runs / "b" / "metrics.jsonl").write_text("{}\n")
    source = run / "final"
    for out, reason in [(run, "folder above it"), (runs, "folder above it"), (tmp_path, "folder above it"),
                        (runs / "b", "not one")]:
        with pytest.raises(ExportError, match=reason):
            export(source, out, overwrite=True)
    assert (run / "checkpoint-2" / "trainer_state.json").is_file() and (runs / "b" / "metrics.jsonl").is_file()
    first = export(source, tmp_path / "exported")
    assert (first / EXPORT_MARKER).is_file()
    again = export(source, tmp_path / "exported", overwrite=True)  # an earlier export may be replaced
    assert (again / "config.json").is_file()
    (again / "checkpoint-9").mkdir()  # ...unless something put a checkpoint into it since
    with pytest.raises(ExportError, match="holds checkpoints"):
        export(source, again, overwrite=True)
