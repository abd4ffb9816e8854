"""Regenerate the PodResources stubs from proto/api.proto.

The .proto is copied under a temporary include root at ``exporter/pb/`` so that the
generated ``*_pb2_grpc.py`` imports ``exporter.pb.api_pb2`` by its package-qualified name.
``generate(dest)`` is also what the staleness test calls, into a temporary directory.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "api.proto"
PACKAGE_DIR = Path(__file__).resolve().parent
OUTPUTS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate(dest: Path) -> list[Path]:
    """Compile proto/api.proto into ``dest`` (a directory); returns the files written."""
    from grpc_tools import protoc  # dev-only dependency

    with tempfile.TemporaryDirectory() as tmp:
        include = Path(tmp)
        (include / "exporter" / "pb").mkdir(parents=True)
        shutil.copy(PROTO, include / "exporter" / "pb" / "api.proto")
        out = Path(tmp) / "out"
        out.mkdir()
        args = [
            "grpc_tools.protoc",
            f"-I{include}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(include / "exporter" / "pb" / "api.proto"),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("protoc failed on proto/api.proto")
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for name in OUTPUTS:
            target = dest / name
            shutil.copy(out / "exporter" / "pb" / name, target)
            written.append(target)
        return written


if __name__ == "__main__":
    for path in generate(PACKAGE_DIR):
        print(f"wrote {path.relative_to(ROOT)}")
    sys.exit(0)
