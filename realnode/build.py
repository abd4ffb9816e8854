"""The real node's binaries: the kubelet (k8s.io/kubernetes cmd/kubelet, unchanged) at each
version, and the fake CRI runtime, built from this module with Go into ``realnode/build/``
(ignored by git), and rebuilt only when their sources change (docs/real-node.md).

    python -m realnode.build            # every version, prints what it built and how long

A binary is fresh when the stamp beside it holds the hash of what it was built from (the
command's Go files, the go.mod and go.sum it was built with): a checkout that changes nothing
keeps the binaries, a changed go.mod rebuilds, whatever the files' times say.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
from pathlib import Path

from bench.reference import ReferenceUnavailable, go_binary

SOURCE = Path(__file__).resolve().parent
BUILD = SOURCE / "build"
# Each kubelet minor: its release and the module file that pins it (a copy of the
# reference's, tidied for cmd/kubelet; see reference/kubelet).
VERSIONS: dict[str, tuple[str, str]] = {
    "1.37": ("1.37.2", "go.mod"),
    "1.36": ("1.36.3", "go.1_36.mod"),
}


class RealNodeUnavailable(ReferenceUnavailable):
    """A binary of the real node cannot be built here (no Go, or a failing build)."""


def _inputs(command: str, modfile: str) -> list[Path]:
    sums = modfile.removesuffix(".mod") + ".sum"
    return [*sorted((SOURCE / "cmd" / command).glob("*.go")), SOURCE / modfile, SOURCE / sums]


def _digest(paths: list[Path], extra: str) -> str:
    h = hashlib.sha256(extra.encode())
    for p in paths:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _build_one(command: str, out: Path, modfile: str, ldflags: str, *, quiet: bool) -> bool:
    """Builds ``cmd/<command>`` into ``out`` unless its stamp says it is fresh; True when
    it built."""
    stamp = out.with_name(out.name + ".sha256")
    digest = _digest(_inputs(command, modfile), ldflags)
    if out.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return False
    go = go_binary()
    if go is None:
        raise RealNodeUnavailable("no Go toolchain ('go' is not on PATH): the real node's "
                                  "kubelet cannot be built")
    BUILD.mkdir(parents=True, exist_ok=True)
    cmd = ["nice", "-n", "10", go, "build", f"-modfile={modfile}", "-o", str(out)]
    if ldflags:
        cmd.append(f"-ldflags={ldflags}")
    cmd.append(f"./cmd/{command}")
    if not quiet:
        print(f"realnode: building {out.name}: {' '.join(cmd[3:])}", file=sys.stderr)
    done = subprocess.run(cmd, cwd=SOURCE, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RealNodeUnavailable(f"building {out.name} failed:\n{done.stderr.strip()[-4000:]}")
    stamp.write_text(digest + "\n")
    return True


def kubelet(version: str, *, quiet: bool = True) -> Path:
    """The kubelet binary of ``version`` ("1.37" or "1.36"), built if missing or stale.
    Raises :class:`RealNodeUnavailable` with the reason when it cannot be built."""
    if version not in VERSIONS:
        raise RealNodeUnavailable(f"unknown kubelet version {version!r} "
                                  f"(one of {', '.join(VERSIONS)})")
    release, modfile = VERSIONS[version]
    major, minor = release.split(".")[:2]
    # What `kubelet --version`, /metrics' kubernetes_build_info and the node status report.
    base = "k8s.io/component-base/version"
    # -s -w: no symbol table or DWARF (nothing reads them; the link is the longest
    # single-threaded step of a cold build, docs/performance.md#the-whole-ci-run).
    ldflags = (f"-s -w -X {base}.gitVersion=v{release} -X {base}.gitMajor={major} "
               f"-X {base}.gitMinor={minor}")
    out = BUILD / f"kubelet-{version}"
    _build_one("kubelet", out, modfile, ldflags, quiet=quiet)
    return out


def fakecri(*, quiet: bool = True) -> Path:
    """The fake CRI runtime (k8s.io/cri-client/pkg/fake at the newest version)."""
    out = BUILD / "fakecri"
    _build_one("fakecri", out, VERSIONS["1.37"][1], "", quiet=quiet)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m realnode.build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="append", choices=sorted(VERSIONS),
                        help="kubelet version to build (repeatable; default: all)")
    args = parser.parse_args(argv)
    try:
        t0 = time.monotonic()
        fakecri(quiet=False)
        for v in args.version or sorted(VERSIONS):
            kubelet(v, quiet=False)
    except RealNodeUnavailable as exc:
        print(f"realnode: {exc}", file=sys.stderr)
        return 1
    print(f"realnode: binaries ready in {BUILD} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
