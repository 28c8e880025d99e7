"""The CPU-side steps of the GPU bring-up: the download plan, slimming sglang-kernel, split and join."""

from __future__ import annotations

import importlib.util
import json
import os
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
    assert "sglang==0.5.23" in command and "sglang-kernel==0.4.6" in command and "grpcio" in command
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


def test_slim_kernel_wheel_drops_the_unneeded_binaries_and_their_record_lines(tmp_path):
    src, dst = tmp_path / "k.whl", tmp_path / "slim.whl"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("sgl_kernel/sm90/common_ops.abi3.so", b"keep")
        z.writestr("sgl_kernel/flash_ops.abi3.so", b"drop")
        z.writestr("sgl_kernel/sm100/x.so", b"drop")
        z.writestr("sgl_kernel-0.4.6.dist-info/RECORD",
                   "sgl_kernel/sm90/common_ops.abi3.so,sha256=a,4\nsgl_kernel/flash_ops.abi3.so,sha256=b,4\n")
    carry.slim_kernel_wheel(src, dst)
    with zipfile.ZipFile(dst) as z:
        assert sorted(z.namelist()) == ["sgl_kernel-0.4.6.dist-info/RECORD", "sgl_kernel/sm90/common_ops.abi3.so"]
        assert b"flash_ops" not in z.read("sgl_kernel-0.4.6.dist-info/RECORD")


def test_download_fetches_a_cp312_manylinux_wheel_and_it_survives_the_carry(tmp_path):
    import subprocess

    wheels = tmp_path / "wheels"
    subprocess.run(carry.pip_download_command(wheels, ["msgspec==0.22.0"]), check=True, capture_output=True,
                   timeout=300)
    (wheel,) = wheels.glob("msgspec-0.22.0-cp312-*manylinux*.whl")
    carry.split(wheels, tmp_path / "pieces", piece_bytes=256 * 1024)
    (joined,) = carry.join(tmp_path / "pieces", tmp_path / "out")
    assert joined.read_bytes() == wheel.read_bytes() and zipfile.is_zipfile(joined)
