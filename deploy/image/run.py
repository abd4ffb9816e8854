"""Run an OCI image layout (build.sh's) as a container runtime would, without one: the
layer unpacked once into a root file system, then the image's entry point run in new mount
and PID namespaces, chrooted, as the image's user, with the image's environment only, the
root bind-mounted read-only, /tmp a tmpfs (the manifests' emptyDir), a fresh /proc and a
minimal /dev, each ``-v`` volume bound (recursively) at its path, as a pod's hostPath
volumes are. The network is the host's (loopback addresses answer from both sides). TERM,
INT and HUP reach the entry point.

    python3 run.py OCI_DIR [--entrypoint CMD] [--user UID:GID] [-e K=V]
                   [-v HOST:PATH[:ro]] [-- ARGS...]

Why not podman: Debian's podman 4.3 pulls the layout (``oci:DIR``), but its crun must set
RLIMIT_NOFILE/NPROC, which an unprivileged sandbox refuses; where podman runs,
``podman run --read-only --rm oci:OCI_DIR`` runs the same image (docs/deploy.md).
Needs root (namespaces, mounts, chroot) and util-linux's unshare."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, value = digest.partition(":")
    return layout / "blobs" / algorithm / value


def image(layout: Path) -> tuple[str, dict[str, Any], list[Path]]:
    """(manifest digest, image config, layer blobs) of the layout's one image."""
    index = json.loads((layout / "index.json").read_text())
    (entry,) = index["manifests"]
    manifest = json.loads(_blob(layout, entry["digest"]).read_text())
    config = json.loads(_blob(layout, manifest["config"]["digest"]).read_text())
    return entry["digest"], config, [_blob(layout, lay["digest"]) for lay in manifest["layers"]]


def unpack(layout: Path, cache: Path) -> Path:
    """The root file system of the layout's image, unpacked once per manifest digest."""
    digest, _, layers = image(layout)
    root = cache / f"rootfs-{digest.split(':')[1][:16]}"
    if (root / ".unpacked").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    for layer in layers:
        with tarfile.open(layer, "r:*") as tar:
            tar.extractall(root, numeric_owner=True, filter="fully_trusted")
    (root / ".unpacked").touch()
    return root


def volume(spec: str) -> tuple[str, str, bool]:
    """``HOST:PATH[:ro]`` as (host path, path in the container, read-only)."""
    host, sep, rest = spec.partition(":")
    path, _, mode = rest.partition(":")
    if not sep or not host.startswith("/") or not path.startswith("/") \
            or mode not in ("", "ro", "rw"):
        raise argparse.ArgumentTypeError(f"not HOST:PATH[:ro] with absolute paths: {spec!r}")
    return host, path, mode == "ro"


def inside(root: Path, path: str) -> Path:
    """``path`` of the container as a host path under ``root``, its symbolic links followed
    within ``root`` (an image's /var/run -> /run must not lead to the host's /run)."""
    here = root
    parts = [p for p in path.split("/") if p not in ("", ".")]
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            here = here.parent if here != root else root
            continue
        nxt = here / part
        if nxt.is_symlink():
            hops += 1
            if hops > 40:
                raise ValueError(f"too many symbolic links in {path!r}")
            link = os.readlink(nxt)
            parts = [p for p in link.split("/") if p not in ("", ".")] + parts
            here = root if link.startswith("/") else here
            continue
        here = nxt
    return here


def script(root: Path, config: dict[str, Any], argv: list[str], user: str,
           env: dict[str, str], volumes: Sequence[tuple[str, str, bool]] = ()) -> str:
    """The shell run inside the new namespaces: mounts, then the entry point."""
    r = shlex.quote(str(root))
    # Mount points are made in the unpacked root (a runtime makes them in its container's
    # layer), all before any volume is bound, so none is made in a volume's host directory.
    targets = [shlex.quote(str(inside(root, path))) for _, path, _ in volumes]
    lines = ["set -eu", *(f"mkdir -p {target}" for target in targets),
             f"mount --bind {r} {r}", f"mount -o remount,bind,ro {r}",
             f"mount -t proc proc {r}/proc",
             f"mount -t tmpfs -o mode=1777,size=256m tmpfs {r}/tmp",
             f"mount -t tmpfs -o mode=755,size=1m tmpfs {r}/dev"]
    for node in DEV_NODES:
        lines += [f"touch {r}/dev/{node}", f"mount --bind /dev/{node} {r}/dev/{node}"]
    for (host, _, read_only), target in zip(volumes, targets, strict=True):
        lines.append(f"mount --rbind {shlex.quote(host)} {target}")
        if read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    workdir = config.get("WorkingDir") or "/"
    command = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "chroot",
               f"--userspec={user}", "--groups=", str(root),
               "sh", "-c", f'cd {shlex.quote(workdir)} && exec "$@"', "sh", *argv]
    # This shell stays the namespace's init: the entry point runs as another user, which
    # loses unshare's parent-death signal, so the shell passes TERM and INT on, and HUP
    # (serve's "poll now"); a trapped signal ends `wait` early, hence the loop.
    lines += [shlex.join(command) + " &", "child=$!",
              'trap \'kill -TERM "$child" 2>/dev/null\' TERM INT',
              'trap \'kill -HUP "$child" 2>/dev/null\' HUP',
              'while :; do', '  status=0; wait "$child" || status=$?',
              '  kill -0 "$child" 2>/dev/null || break', 'done',
              'exit "$status"']
    return "\n".join(lines)


def main(args_in: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layout", type=Path, help="OCI image layout directory")
    parser.add_argument("--entrypoint", default=None, help="replace the image's entry point")
    parser.add_argument("--user", default=None, help="UID:GID (default: the image's User)")
    parser.add_argument("-e", "--env", action="append", default=[], metavar="K=V")
    parser.add_argument("-v", "--volume", action="append", default=[], type=volume,
                        metavar="HOST:PATH[:ro]", help="bind HOST at PATH (recursively)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="where to unpack (default: beside the layout)")
    argv_in = list(sys.argv[1:] if args_in is None else args_in)
    cut = argv_in.index("--") if "--" in argv_in else len(argv_in)
    args = parser.parse_args(argv_in[:cut])
    rest = argv_in[cut + 1:]
    _, image_config, _ = image(args.layout)
    config = image_config["config"]
    root = unpack(args.layout, args.cache or args.layout.parent)
    entry = shlex.split(args.entrypoint) if args.entrypoint is not None \
        else list(config.get("Entrypoint") or [])
    argv = entry + (rest or list(config.get("Cmd") or []))
    env = dict(item.split("=", 1) for item in config.get("Env", []))
    env.update(item.split("=", 1) for item in args.env)
    user = args.user or config.get("User") or "0:0"
    if ":" not in user:
        user += ":" + user
    proc = subprocess.Popen(["unshare", "--mount", "--pid", "--fork", "--kill-child=SIGTERM",
                             "--propagation", "private", "sh", "-c",
                             script(root, config, argv, user, env, args.volume)])

    def forward(signum: int, _frame: object) -> None:
        # unshare ignores TERM and INT itself: they go to the namespace's init shell.
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        for pid in children.read_text().split() if children.exists() else ():
            os.kill(int(pid), signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
