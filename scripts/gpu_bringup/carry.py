"""Carry what the offline GPU machine lacks in pieces of at most 64 MiB (route B of shared/docs/gpu-bringup.md).

Run here (network to package registries only), in the repository root:

    python scripts/gpu_bringup/carry.py plan                 # what would be downloaded, and the pip command
    python scripts/gpu_bringup/carry.py download --out .gpu/whl   # pip download the cp312 wheels, slim
                                                             # sglang-kernel, build the sglang-faser wheel
    python scripts/gpu_bringup/carry.py pack .gpu/whl --out .gpu  # one tar cut into .gpu/p00, p01, ... (60 MiB)
    (``split DIR --pieces P`` / ``join P --out DIR`` do the same per file, without the tar)
    python scripts/gpu_bringup/carry.py smollm2 --out .gpu/smollm2   # the real model's GGUF (sha256 checked),
    python scripts/gpu_bringup/carry.py pack .gpu/smollm2 --out .gpu/smol   # in two 60 MiB folders

``.gpu/`` is git-ignored, so it travels only when named in the device tool's ``carry``. Then one device call
per folder, back to back (a gap of more than ~30 s gives the machine back and loses what was staged), each
carrying ``.gpu/pNN`` and starting with ``mkdir -p $HOME/sgl/stage && cp .gpu/pNN/* $HOME/sgl/stage/``; the last
call goes on with

    bash scripts/gpu_bringup/remote.sh install $HOME/sgl/stage   # unpack + verify, install, probe, models
    bash scripts/gpu_bringup/remote.sh bench                     # serve_bench in the background
    bash scripts/gpu_bringup/remote.sh wait 540                  # in later calls: poll, results into $OUT

Route B keeps the image's torch 2.11 and carries sglang 0.5.23 with sglang-kernel 0.4.6 (built for torch 2.11),
flashinfer, and the pure-Python packages the server imports that the image lacks (gpu-bringup.md §4).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

PIECE_BYTES = 60 * 1024 * 1024  # under the device tool's 64 MiB per call
PYTHON = "3.12"
# pip matches --platform tags exactly (no implied older manylinux), so name every one a wheel may carry;
# the image has glibc >= 2.34 (sglang's own wheel is manylinux_2_34)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 18, 24, 26, 27, 28, 31, 34)] + ["manylinux2014_x86_64", "any"]
ROUTE_B = [
    "sglang==0.5.23", "sglang-kernel==0.4.6", "flashinfer-python==0.7.2", "transformers==5.19.0",
    "apache-tvm-ffi==0.1.11", "xgrammar==0.2.7", "fastapi==0.165.0", "starlette==1.10.0", "uvicorn==0.54.0",
    "pydantic==2.14.3", "pydantic_core==2.50.4", "annotated-types", "typing-inspection", "python-multipart",
    "orjson", "pyzmq==27.3.0", "msgspec", "setproctitle", "pybase64", "partial-json-parser", "openai==2.8.0",
    "jiter", "distro", "sniffio", "jsonschema", "referencing", "rpds-py", "jsonschema-specifications",
    "compressed-tensors==0.18.0", "loguru", "gguf==0.19.0", "accelerate==1.15.0", "soundfile==0.13.1", "cffi", "pycparser", "dill",
    "ipython==9.18.1", "jedi", "parso", "traitlets", "prompt_toolkit", "wcwidth", "pexpect", "ptyprocess",
    "stack-data", "executing", "asttokens", "pure_eval", "matplotlib-inline", "ipython_pygments_lexers",
    "zstandard", "datasets==5.2.0", "multiprocess", "watchfiles", "interegular", "opentelemetry-api",
    # sglang-faser's own needs beyond the image, pinned as in requirements/cpu-lock.txt
    "grpcio==1.85.1", "grpcio-health-checking==1.85.1", "grpcio-reflection==1.85.1", "protobuf==7.36.2",
    "prometheus_client==0.26.0", "tqdm==4.70.1", "aiohttp==3.14.5", "aiohappyeyeballs==2.7.1", "aiosignal==1.4.0",
    "frozenlist==1.8.0", "multidict==7.2.1", "propcache==0.5.4", "yarl==1.25.1", "attrs==26.1.0",  # the driver
]
SLIM = re.compile(r"sgl_kernel/(flash_ops\.abi3\.so|sm100/|infllm_ops|flashmla_ops)")
# the remote runs the repository's own sglang_faser (PYTHONPATH); its wheel is there for the plugin entry point,
# so it travels without the shipped weights (37 MB -> 0.2 MB)
SLIM_FASER = re.compile(r"sglang_faser/models/[^/]+/.*(\.safetensors|tokenizer\.json)(,|$)")


def pip_download_command(out: Path, packages: list[str] | None = None) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", PYTHON,
            "--implementation", "cp", *(arg for tag in PLATFORMS for arg in ("--platform", tag)), "-d", str(out),
            *(packages or ROUTE_B)]


def slim_wheel(src: Path, dst: Path, drop: re.Pattern = SLIM) -> None:
    """A wheel without the files ``drop`` matches, RECORD mended so pip accepts it. Default: sglang-kernel without
    the FA3 / Blackwell / MLA binaries (gpu-bringup.md §5): 377 MB -> 13 MB."""
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zo:
        for info in zi.infolist():
            if drop.search(info.filename):
                continue
            data = zi.read(info.filename)
            if info.filename.endswith("RECORD"):
                lines = [line for line in data.split(b"\n") if line.strip() and not drop.search(line.decode())]
                data = b"\n".join(lines) + b"\n"
            zo.writestr(info, data)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def split(directory: Path, pieces: Path, piece_bytes: int = PIECE_BYTES) -> dict:
    """Cut every file of ``directory`` into numbered pieces; manifest.json says how to put them back."""
    pieces.mkdir(parents=True, exist_ok=True)
    manifest = {"piece_bytes": piece_bytes, "files": []}
    for path in sorted(p for p in directory.iterdir() if p.is_file()):
        parts = []
        with open(path, "rb") as handle:
            for index, chunk in enumerate(iter(lambda: handle.read(piece_bytes), b"")):
                name = f"{path.name}.part{index:03d}"
                (pieces / name).write_bytes(chunk)
                parts.append({"name": name, "sha256": hashlib.sha256(chunk).hexdigest(), "bytes": len(chunk)})
        manifest["files"].append({"name": path.name, "sha256": sha256(path), "bytes": path.stat().st_size,
                                  "parts": parts})
    (pieces / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def join(pieces: Path, out: Path) -> list[Path]:
    """Reassemble every file of the manifest, checking each piece and each whole file; raises on any mismatch."""
    manifest = json.loads((pieces / "manifest.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for entry in manifest["files"]:
        target = out / entry["name"]
        with open(target, "wb") as handle:
            for part in entry["parts"]:
                chunk = (pieces / part["name"]).read_bytes()
                if hashlib.sha256(chunk).hexdigest() != part["sha256"]:
                    raise ValueError(f"piece {part['name']} is corrupt (sha256 mismatch); carry it again")
                handle.write(chunk)
        if sha256(target) != entry["sha256"]:
            raise ValueError(f"{entry['name']} does not match its sha256 after reassembly")
        written.append(target)
    return written


def pack(directory: Path, out: Path, piece_bytes: int = PIECE_BYTES) -> list[Path]:
    """One tar of ``directory`` cut into pieces, each in its own folder ``out/pNN`` (one device call carries one).

    Every folder also holds the small manifest, so whichever folders reach the GPU machine can be checked there.
    """
    import shutil
    import tarfile

    out.mkdir(parents=True, exist_ok=True)
    staging = out / "staging"
    staging.mkdir(exist_ok=True)
    with tarfile.open(staging / "bundle.tar", "w") as tar:
        tar.add(directory, arcname=directory.name)
    flat = out / "flat"
    split(staging, flat, piece_bytes)
    shutil.rmtree(staging)
    manifest = flat / "manifest.json"
    folders = []
    for index, part in enumerate(sorted(flat.glob("bundle.tar.part*"))):
        folder = out / f"p{index:02d}"
        folder.mkdir(exist_ok=True)
        part.replace(folder / part.name)
        shutil.copy(manifest, folder / manifest.name)
        folders.append(folder)
    shutil.rmtree(flat)
    return folders


def unpack(stage: Path, out: Path) -> Path:
    """Join the pieces copied into ``stage`` (checking every sha256) and untar; returns the unpacked folder."""
    import tarfile

    (bundle,) = join(stage, stage / "joined")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundle) as tar:
        names = {member.name.split("/")[0] for member in tar.getmembers()}
        tar.extractall(out, filter="data")
    bundle.unlink()
    return out / sorted(names)[0]


def download(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(pip_download_command(out), check=True)
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(root)], check=True)
    for pattern, drop in (("sglang_kernel-*.whl", SLIM), ("sglang_faser-*.whl", SLIM_FASER)):
        for wheel in out.glob(pattern):
            slim = wheel.with_suffix(".slim")
            slim_wheel(wheel, slim, drop)
            slim.replace(wheel)


def smollm2(out: Path) -> Path:
    """SmolLM2-135M-Instruct's GGUF (98 MB, sha256 checked) in ``out``: the GPU machine converts it itself
    (``remote.sh smollm2``), so two device calls carry a real model; its drafts travel with the repository."""
    import shutil

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from sglang_faser.models import smollm2 as model

    out.mkdir(parents=True, exist_ok=True)
    gguf = model.fetch_gguf(model.cache_root(), quiet=True)
    shutil.copy(gguf, out / gguf.name)
    return out / gguf.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("plan")
    down = sub.add_parser("download")
    down.add_argument("--out", type=Path, required=True)
    cut = sub.add_parser("split")
    cut.add_argument("directory", type=Path)
    cut.add_argument("--pieces", type=Path, required=True)
    glue = sub.add_parser("join")
    glue.add_argument("pieces", type=Path)
    glue.add_argument("--out", type=Path, required=True)
    bundle = sub.add_parser("pack", help="tar DIR, cut it into folders OUT/pNN of at most --piece-mib each")
    bundle.add_argument("directory", type=Path)
    bundle.add_argument("--out", type=Path, required=True)
    bundle.add_argument("--piece-mib", type=int, default=PIECE_BYTES >> 20,
                        help="piece size; the repository travels too, so keep piece + repo under 64 MiB")
    model = sub.add_parser("smollm2", help="SmolLM2-135M-Instruct's GGUF into OUT, to pack")
    model.add_argument("--out", type=Path, required=True)
    opened = sub.add_parser("unpack", help="on the GPU machine: join the staged pieces, check, untar")
    opened.add_argument("stage", type=Path)
    opened.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "plan":
        print(" ".join(pip_download_command(Path("WHEELS"))))
    elif args.command == "download":
        download(args.out)
    elif args.command == "split":
        manifest = split(args.directory, args.pieces)
        total = sum(f["bytes"] for f in manifest["files"])
        count = sum(len(f["parts"]) for f in manifest["files"])
        print(f"{len(manifest['files'])} files, {total / 2**20:.1f} MiB, {count} pieces in {args.pieces}")
    elif args.command == "join":
        for path in join(args.pieces, args.out):
            print(path)
    elif args.command == "pack":
        folders = pack(args.directory, args.out, args.piece_mib << 20)
        print(f"{len(folders)} folders: carry one per device call, back to back: {' '.join(map(str, folders))}")
    elif args.command == "smollm2":
        print(smollm2(args.out))
    elif args.command == "unpack":
        print(unpack(args.stage, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
