"""Generate the Python stubs of proto/faser/v1/control.proto into control/faser/v1/ (grpcio-tools).

    python scripts/gen_proto.py            # write the stubs
    python scripts/gen_proto.py --out DIR  # write them elsewhere (the drift test compares the two)

protoc names imports after the proto's path (``from faser.v1 import control_pb2``); the stubs live in the
``control`` package, so that one import line is rewritten to ``from control.faser.v1 import control_pb2``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO = PROTO_ROOT / "faser" / "v1" / "control.proto"
DEFAULT_OUT = ROOT / "control"


def generate(out: Path) -> list[Path]:
    from grpc_tools import protoc

    out.mkdir(parents=True, exist_ok=True)
    args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}",
            str(PROTO)]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    stubs = sorted((out / "faser" / "v1").glob("control_pb2*"))
    for path in stubs:
        text = path.read_text().replace("from faser.v1 import", "from control.faser.v1 import")
        path.write_text(text)
    for package in (out / "faser", out / "faser" / "v1"):
        (package / "__init__.py").touch()
    return stubs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path.relative_to(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
