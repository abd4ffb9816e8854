"""Write a root file system directory as a one-layer OCI image layout, byte for byte the
same from the same tree: entries sorted, owners and modes kept, every mtime clamped to
SOURCE_DATE_EPOCH, gzip without a name or time. Only the standard library: it runs on the
build host's Python, before the image has one.

    python3 oci.py ROOTFS OUT_DIR --tag TAG --config config.json

config.json holds the image's runtime settings (User, Env, Entrypoint, ExposedPorts,
Labels, WorkingDir) in the OCI image config's ``config`` shape. Prints the manifest digest.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import os
import shutil
import stat
import sys
import tarfile
from pathlib import Path
from typing import Any

# Mount points the runtime fills: kept as empty directories, their contents never packed.
RUNTIME_MOUNTS = ("dev", "proc", "sys", "run", "tmp")


def _walk(root: Path) -> list[str]:
    names: list[str] = []
    for top, dirs, files in os.walk(root):
        rel = os.path.relpath(top, root)
        dirs.sort()
        if rel in RUNTIME_MOUNTS:
            dirs.clear()
            files = []
        for name in sorted(dirs + files):
            names.append(name if rel == "." else f"{rel}/{name}")
    return sorted(names)


def _info(root: Path, rel: str, epoch: int, seen: dict[tuple[int, int], str]) -> tuple[
        tarfile.TarInfo, Path | None]:
    path = root / rel
    st = path.lstat()
    info = tarfile.TarInfo(rel)
    info.mode = stat.S_IMODE(st.st_mode)
    info.uid, info.gid = st.st_uid, st.st_gid
    info.uname = info.gname = ""
    info.mtime = min(int(st.st_mtime), epoch)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in seen:
            info.type, info.linkname = tarfile.LNKTYPE, seen[key]
            return info, None
        seen[key] = rel
        info.size = st.st_size
        return info, path
    else:
        raise SystemExit(f"oci.py: {rel}: a device, socket or pipe has no place in an image")
    return info, None


def _layer(root: Path, blobs: Path, epoch: int) -> tuple[str, str, int]:
    """Pack the tree; (diff_id, digest, size) of the gzipped layer."""
    raw = blobs / "layer.tar"
    seen: dict[tuple[int, int], str] = {}
    with tarfile.open(raw, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in _walk(root):
            info, src = _info(root, rel, epoch, seen)
            if src is None:
                tar.addfile(info)
            else:
                with src.open("rb") as f:
                    tar.addfile(info, f)
    diff_id = _sha256(raw)
    packed = blobs / "layer.tar.gz"
    with raw.open("rb") as src_f, packed.open("wb") as out, gzip.GzipFile(
            filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
        shutil.copyfileobj(src_f, gz, 1 << 20)
    raw.unlink()
    digest = _sha256(packed)
    size = packed.stat().st_size
    packed.rename(blobs / digest)
    return diff_id, digest, size


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _blob(blobs: Path, doc: dict[str, Any]) -> tuple[str, int]:
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return digest, len(data)


def write(root: Path, out: Path, tag: str, runtime: dict[str, Any], epoch: int) -> str:
    if out.exists():
        shutil.rmtree(out)
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    diff_id, layer_digest, layer_size = _layer(root, blobs, epoch)
    created = dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {
        "architecture": "amd64", "os": "linux", "created": created, "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": created, "created_by": "deploy/image/build.sh"}],
    }
    config_digest, config_size = _blob(blobs, config)
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": f"sha256:{config_digest}", "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": f"sha256:{layer_digest}", "size": layer_size}],
        "annotations": {"org.opencontainers.image.created": created},
    }
    manifest_digest, manifest_size = _blob(blobs, manifest)
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": f"sha256:{manifest_digest}", "size": manifest_size,
        "annotations": {"org.opencontainers.image.ref.name": tag}}]}
    (out / "index.json").write_text(json.dumps(index, sort_keys=True) + "\n")
    (out / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}\n')
    return f"sha256:{manifest_digest}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--config", type=Path, required=True,
                        help="JSON file: the image config's runtime settings")
    args = parser.parse_args(argv)
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    runtime = json.loads(args.config.read_text())
    print(write(args.rootfs, args.out, args.tag, runtime, epoch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
