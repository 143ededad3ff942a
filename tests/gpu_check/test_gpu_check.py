"""scripts/gpu_check: the parts that can be checked without a GPU (shapes, datasheet figures, the prepared folder's
metadata, the JSON written item by item, `make gpu-check`'s choice of python) and, marked slow, the image replica."""

import importlib.metadata as metadata
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
_path = list(sys.path)
sys.path.insert(0, str(ROOT / "scripts" / "gpu_check"))

import perf  # noqa: E402
import prepare  # noqa: E402
import run  # noqa: E402

sys.path[:] = _path  # run.py appends .gpu_check/site: the rest of the suite must not import from it


@pytest.mark.parametrize("name", ["Qwen2.5-0.5B", "Qwen2.5-1.5B"])
def test_qwen25_shapes_are_qwen2_with_the_published_parameter_count(name):
    """0.5B: embeddings 151936 x 896 (tied) + 24 x (q 896x896+896, k and v 896x128+128, o 896x896, MLP 3 x 896 x 4864,
    2 norms of 896) + the final norm = 494,032,768; 1.5B likewise with head_dim 128 = 1,543,714,304."""
    from transformers import AutoModelForCausalLM

    config = perf.qwen25_config(name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert config.model_type == "qwen2" and type(model).__name__ == "Qwen2ForCausalLM"
    q = model.model.layers[0].self_attn.q_proj
    head_dim = config.hidden_size // config.num_attention_heads
    assert (q.in_features, q.out_features, head_dim) == (config.hidden_size, config.hidden_size, {896: 64, 1536: 128}[
        config.hidden_size])
    assert q.bias is not None  # Qwen2's q/k/v biases (Llama has none)
    assert sum(p.numel() for p in model.parameters()) == perf.QWEN25_PARAMS[name]


def test_datasheet_figures_per_device_name():
    assert perf.datasheet("NVIDIA H200") == (989e12, 4.8e12)
    assert perf.datasheet("NVIDIA H100 80GB HBM3") == (989e12, 3.35e12)
    assert perf.datasheet("NVIDIA H100 PCIe") == (756e12, 2.0e12)
    assert perf.datasheet("NVIDIA A100-SXM4-80GB") == (312e12, 2.0e12)
    assert perf.datasheet("NVIDIA GeForce RTX 4090") is None


def test_deepspeed_unpacked_from_its_sdist_has_distribution_metadata(tmp_path):
    """The fault the image replica found: DeepSpeed's folder without a dist-info is invisible to importlib.metadata
    (transformers' HfDeepSpeedConfig then raises PackageNotFoundError for 'deepspeed>=0.9.3')."""
    sdist = tmp_path / "deepspeed-0.17.2.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in (("deepspeed-0.17.2/PKG-INFO", "Metadata-Version: 2.1\nName: deepspeed\nVersion: 0.17.2\n"),
                           ("deepspeed-0.17.2/deepspeed/__init__.py", "x = 1\n"),
                           ("deepspeed-0.17.2/csrc/adam.cpp", "")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    site = tmp_path / "site"
    site.mkdir()
    assert prepare.unpack_deepspeed(sdist, site) == sdist.name
    assert (site / "deepspeed" / "__init__.py").is_file() and not (site / "csrc").exists()
    assert [d.version for d in metadata.distributions(name="deepspeed", path=[str(site)])] == ["0.17.2"]
    assert prepare.missing_metadata(site, ["deepspeed", "pydantic"]) == ["pydantic"]


def test_the_json_is_written_after_each_item(tmp_path, monkeypatch, capsys):
    """A run killed during an item keeps every figure measured before it."""
    out = tmp_path / "out"
    seen = []

    def first():
        return "one", {"figure": 1}

    def second():
        seen.append(json.loads((out / "gpu_check.json").read_text()))  # what a kill here would leave
        raise run.checks.Skip("not here")

    monkeypatch.setattr(run, "items", lambda work: {"first": first, "second": second})
    monkeypatch.setattr(sys, "argv", ["run.py", "--out", str(out)])
    assert run.main() == 0
    assert seen[0]["items"]["first"]["figure"] == 1 and "second" not in seen[0]["items"]
    final = json.loads((out / "gpu_check.json").read_text())
    assert final["items"]["second"]["status"] == "SKIP"
    assert "second: SKIP (not here)" in capsys.readouterr().out


def make(tmp_path, *args, python3_has_torch: bool):
    """`make -n ARGS` with a python3 first on PATH that has (or lacks) torch."""
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "python3").write_text(f"#!/bin/sh\nexit {0 if python3_has_torch else 1}\n")
    (fake / "python3").chmod(0o755)
    (tmp_path / "gpu_check" / "manifest.json").parent.mkdir(exist_ok=True)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["make", "-s", "-C", str(ROOT), *args], capture_output=True, text=True, env=env)


def test_make_gpu_check_uses_python3_with_torch_else_the_venv_else_says_what_it_needs(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\n")
    (venv / "bin" / "python").chmod(0o755)
    with_torch = make(tmp_path, "-n", "gpu-check", f"VENV={venv}", python3_has_torch=True)
    assert "python3 scripts/gpu_check/run.py" in with_torch.stdout
    without = make(tmp_path, "-n", "gpu-check", f"VENV={venv}", python3_has_torch=False)
    assert f"{venv}/bin/python scripts/gpu_check/run.py" in without.stdout
    neither = make(tmp_path, "gpu-check", f"VENV={tmp_path / 'none'}", python3_has_torch=False)
    assert neither.returncode != 0
    assert "make gpu-check needs a python with torch and transformers" in neither.stdout + neither.stderr


@pytest.mark.slow
def test_image_replica_every_item_ends_trial_or_skip():
    """`make gpu-check-replica`: a venv of the GPU image's packages only (no deepspeed, pydantic, ...) runs run.py as
    a CPU trial on .gpu_check; a missing package or its metadata shows as a FAIL line here, not on the GPU."""
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "gpu-check-replica"], capture_output=True, text=True,
                          timeout=1800)
    statuses = re.findall(r"^.+: (PASS|FAIL|SKIP|TRIAL) \(", done.stdout.replace("\r", "\n"), re.M)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(statuses) == len(run.items(Path("."))) and set(statuses) <= {"TRIAL", "SKIP"}, statuses
