"""The CPU-side steps of the GPU bring-up: the download plan, slimming sglang-kernel, split and join."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("carry", ROOT / "scripts" / "gpu_bringup" / "carry.py")
carry = importlib.util.module_from_spec(spec)
spec.loader.exec_module(carry)


def test_plan_downloads_cp312_wheels_of_route_b():
    command = carry.pip_download_command(Path("W"))
    assert command[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in command
    assert command[command.index("--python-version") + 1] == "3.12"
    assert "sglang==0.5.23" in command and "sglang-kernel==0.4.6" in command and "grpcio==1.85.1" in command
    platforms = {command[i + 1] for i, arg in enumerate(command) if arg == "--platform"}
    assert {"manylinux_2_27_x86_64", "manylinux_2_34_x86_64", "manylinux2014_x86_64", "any"} <= platforms
    assert len({name.split("==")[0].lower().replace("_", "-") for name in carry.ROUTE_B}) == len(carry.ROUTE_B)
    assert not any(name.startswith("torch") for name in carry.ROUTE_B)  # route B keeps the image's torch


def test_split_and_join_round_trip_with_hash_checks(tmp_path):
    source, pieces, out = tmp_path / "src", tmp_path / "pieces", tmp_path / "out"
    source.mkdir()
    big = os.urandom(10_000)
    (source / "big.whl").write_bytes(big)
    (source / "small.whl").write_bytes(b"tiny")
    manifest = carry.split(source, pieces, piece_bytes=4096)
    parts = {f["name"]: len(f["parts"]) for f in manifest["files"]}
    assert parts == {"big.whl": 3, "small.whl": 1}
    assert all(p.stat().st_size <= 4096 for p in pieces.glob("*.part*"))
    carry.join(pieces, out)
    assert (out / "big.whl").read_bytes() == big and (out / "small.whl").read_bytes() == b"tiny"
    corrupt = pieces / "big.whl.part001"
    corrupt.write_bytes(b"x" + corrupt.read_bytes()[1:])
    with pytest.raises(ValueError, match="corrupt"):
        carry.join(pieces, tmp_path / "again")
    assert json.loads((pieces / "manifest.json").read_text())["piece_bytes"] == 4096


def test_slim_wheel_drops_the_unneeded_binaries_and_their_record_lines(tmp_path):
    src, dst = tmp_path / "k.whl", tmp_path / "slim.whl"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("sgl_kernel/sm90/common_ops.abi3.so", b"keep")
        z.writestr("sgl_kernel/flash_ops.abi3.so", b"drop")
        z.writestr("sgl_kernel/sm100/x.so", b"drop")
        z.writestr("sgl_kernel-0.4.6.dist-info/RECORD",
                   "sgl_kernel/sm90/common_ops.abi3.so,sha256=a,4\nsgl_kernel/flash_ops.abi3.so,sha256=b,4\n")
    carry.slim_wheel(src, dst)
    with zipfile.ZipFile(dst) as z:
        assert sorted(z.namelist()) == ["sgl_kernel-0.4.6.dist-info/RECORD", "sgl_kernel/sm90/common_ops.abi3.so"]
        assert b"flash_ops" not in z.read("sgl_kernel-0.4.6.dist-info/RECORD")


def test_the_faser_wheel_travels_without_the_shipped_weights_but_with_its_code_and_configs(tmp_path):
    src, dst = tmp_path / "f.whl", tmp_path / "slim.whl"
    names = ["sglang_faser/models/small_pair/target/model.safetensors",
             "sglang_faser/models/small_pair/target/tokenizer.json",
             "sglang_faser/models/small_pair/target/config.json", "sglang_faser/models/small_pair.py",
             "sglang_faser/engine/plugin.py"]
    with zipfile.ZipFile(src, "w") as z:
        for name in names:
            z.writestr(name, b"x")
        z.writestr("sglang_faser-0.1.0.dist-info/RECORD", "\n".join(f"{n},sha256=a,1" for n in names) + "\n")
    carry.slim_wheel(src, dst, carry.SLIM_FASER)
    with zipfile.ZipFile(dst) as z:
        kept = set(z.namelist()) - {"sglang_faser-0.1.0.dist-info/RECORD"}
        assert kept == set(names[2:])
        assert b"safetensors" not in z.read("sglang_faser-0.1.0.dist-info/RECORD")


def test_the_stand_in_modules_answer_what_sglang_reads_on_a_hopper_gpu_without_cutlass_or_flash_mla():
    import subprocess

    stub_dir = Path(carry.__file__).parent / "no_cutlass"
    code = ("from sglang.kernels.ops.gemm.cutedsl_dual_gemm import MAX_DUAL_GEMM_DECODE_TOKENS, DualGemmQuantMode,"
            " can_use_dual_gemm\n"
            "from flash_mla.flash_mla_interface import FlashMLASchedMeta\n"
            "assert not can_use_dual_gemm(1, 4096, 14336, DualGemmQuantMode.UNQUANT)\n"
            "assert not DualGemmQuantMode.UNQUANT.is_dynamic and DualGemmQuantMode.DYNAMIC_PER_TOKEN.is_dynamic\n"
            "try:\n    FlashMLASchedMeta()\nexcept RuntimeError as e:\n    print('absent:', e)\n")
    env = {**os.environ, "PYTHONPATH": f"{stub_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "absent: flash_mla is not installed" in result.stdout


def test_download_fetches_a_cp312_manylinux_wheel_and_it_survives_the_carry(tmp_path):
    import subprocess

    wheels = tmp_path / "wheels"
    subprocess.run(carry.pip_download_command(wheels, ["msgspec==0.22.0"]), check=True, capture_output=True,
                   timeout=300)
    (wheel,) = wheels.glob("msgspec-0.22.0-cp312-*manylinux*.whl")
    carry.split(wheels, tmp_path / "pieces", piece_bytes=256 * 1024)
    (joined,) = carry.join(tmp_path / "pieces", tmp_path / "out")
    assert joined.read_bytes() == wheel.read_bytes() and zipfile.is_zipfile(joined)


def test_pack_puts_one_piece_per_folder_and_unpack_restores_the_tree(tmp_path):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    payload = {"a-1.0-py3-none-any.whl": os.urandom(9_000), "b-2.0-cp312-cp312-manylinux_2_34_x86_64.whl": b"b" * 10}
    for name, data in payload.items():
        (wheels / name).write_bytes(data)
    folders = carry.pack(wheels, tmp_path / "gpu", piece_bytes=4096)
    assert [f.name for f in folders] == [f"p{i:02d}" for i in range(len(folders))] and len(folders) >= 3
    for folder in folders:  # each device call carries one folder: one piece and the manifest
        assert sorted(p.name for p in folder.iterdir())[-1] == "manifest.json" and len(list(folder.iterdir())) == 2
    stage = tmp_path / "stage"  # on the GPU machine every call copies its folder here
    stage.mkdir()
    for folder in folders:
        for item in folder.iterdir():
            (stage / item.name).write_bytes(item.read_bytes())
    unpacked = carry.unpack(stage, tmp_path / "sgl")
    assert unpacked.name == "whl" and {p.name: p.read_bytes() for p in unpacked.iterdir()} == payload
    (stage / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError):
        carry.unpack(stage, tmp_path / "again")


def test_dummy_weight_models_have_real_shapes_and_a_tokenizer_sglang_accepts(tmp_path):
    spec = importlib.util.spec_from_file_location("make_models", ROOT / "scripts" / "gpu_bringup" / "make_models.py")
    make_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_models)
    folders = make_models.write_models(tmp_path, vocab=512)
    from transformers import AutoConfig, AutoTokenizer

    target, head = AutoConfig.from_pretrained(folders[0]), AutoConfig.from_pretrained(folders[1])
    assert (target.hidden_size, target.num_hidden_layers, target.num_key_value_heads) == (4096, 32, 8)
    assert head.architectures == ["LlamaForCausalLMEagle"] and head.num_hidden_layers == 1
    tok = AutoTokenizer.from_pretrained(folders[1])
    ids = tok("w7 w500 hello").input_ids
    assert ids == [7, 500, 3] and tok.decode(ids) == "w7 w500 <unk>"
    from sglang.srt.configs.model_config import ModelConfig

    assert ModelConfig(str(folders[0])).hf_config.vocab_size == 512


def test_remote_script_parses_and_refuses_an_unknown_step(tmp_path):
    import subprocess

    script = ROOT / "scripts" / "gpu_bringup" / "remote.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    done = subprocess.run(["bash", str(script), "reboot"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "S": str(tmp_path)})
    assert done.returncode == 2 and "unknown command reboot" in done.stderr


def test_smollm2_travels_in_two_folders_and_the_gpu_side_converts_it(tmp_path):
    """The real model's GGUF, packed for two device calls; ``remote.sh smollm2`` joins, checks and converts it."""
    import shutil
    import subprocess

    from sglang_faser.models import smollm2

    gguf = carry.smollm2(tmp_path / "model")
    assert carry.sha256(gguf) == smollm2.GGUF_SHA256
    folders = carry.pack(tmp_path / "model", tmp_path / "carry")
    assert len(folders) == 2
    stage = tmp_path / "stage"
    stage.mkdir()
    for folder in folders:  # what each device call copies into the stage
        for piece in folder.iterdir():
            shutil.copy(piece, stage / piece.name)
    remote = tmp_path / "remote"
    env = {**os.environ, "S": str(remote), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_bringup" / "remote.sh"), "smollm2", str(stage)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (remote / "cache" / "smollm2-135m-instruct" / "hf" / "model.safetensors").exists()
