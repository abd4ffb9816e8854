"""Run an OCI image layout (build.sh's) as a container runtime would, without one: the
layer unpacked once into a root file system, then the image's entry point run in new mount
and PID namespaces, chrooted, as the image's user, with the image's environment only, the
root bind-mounted read-only, /tmp a tmpfs (the manifests' emptyDir), a fresh /proc and a
minimal /dev. The network is the host's (loopback addresses answer from both sides).

    python3 run.py OCI_DIR [--entrypoint CMD] [--user UID:GID] [-e K=V] [-- ARGS...]

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


def script(root: Path, config: dict[str, Any], argv: list[str], user: str,
           env: dict[str, str]) -> str:
    """The shell run inside the new namespaces: mounts, then the entry point."""
    r = shlex.quote(str(root))
    lines = ["set -eu",
             f"mount --bind {r} {r}", f"mount -o remount,bind,ro {r}",
             f"mount -t proc proc {r}/proc",
             f"mount -t tmpfs -o mode=1777,size=256m tmpfs {r}/tmp",
             f"mount -t tmpfs -o mode=755,size=1m tmpfs {r}/dev"]
    for node in DEV_NODES:
        lines += [f"touch {r}/dev/{node}", f"mount --bind /dev/{node} {r}/dev/{node}"]
    workdir = config.get("WorkingDir") or "/"
    command = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "chroot",
               f"--userspec={user}", "--groups=", str(root),
               "sh", "-c", f'cd {shlex.quote(workdir)} && exec "$@"', "sh", *argv]
    # This shell stays the namespace's init: the entry point runs as another user, which
    # loses unshare's parent-death signal, so the shell passes TERM and INT on.
    lines += [shlex.join(command) + " &", "child=$!",
              'trap \'kill -TERM "$child" 2>/dev/null\' TERM INT',
              'wait "$child" || status=$?', 'wait "$child" 2>/dev/null || true',
              'exit "${status:-0}"']
    return "\n".join(lines)


def main(args_in: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layout", type=Path, help="OCI image layout directory")
    parser.add_argument("--entrypoint", default=None, help="replace the image's entry point")
    parser.add_argument("--user", default=None, help="UID:GID (default: the image's User)")
    parser.add_argument("-e", "--env", action="append", default=[], metavar="K=V")
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
                             script(root, config, argv, user, env)])

    def forward(signum: int, _frame: object) -> None:
        # unshare ignores TERM and INT itself: they go to the namespace's init shell.
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        for pid in children.read_text().split() if children.exists() else ():
            os.kill(int(pid), signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
