"""How long ``make demo`` takes on a fresh clone until it prints its URLs.

Clones the repository's committed HEAD into a scratch directory, runs ``make demo`` there
(which builds its own ``.venv``) with the exporter on a free loopback port, and stops it
once the URL lines are out. make echoes each recipe line as it starts it, so the elapsed
time splits into phases: ``setup`` (the venv and the installer), ``install`` (the demo's
dependencies) and ``start`` (the demo's own start-up until its ``/metrics`` line). The last
line is JSON; ``pyc_writes`` says whether Python may write bytecode here
(``PYTHONDONTWRITEBYTECODE`` unset), as on a developer's machine.

    python -m bench.demo_start                      # the installers' caches as they are
    python -m bench.demo_start --cold               # empty, throwaway caches

Nothing outside the scratch directory is written but the installers' caches (or the throwaway
ones).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Recipe lines make echoes, in the order they start: each one ends the phase before it
# ("setup": the venv and the installer; "install": the project and its dependencies).
MARKERS = (("setup", re.compile(r" install .*(-e \.|-r pyproject\.toml)$")),
           ("install", re.compile(r"(podres-exporter|exporter\.cli) demo\b")),
           ("start", re.compile(r"/metrics$")))


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=str(REPO), help="repository to clone (its HEAD)")
    parser.add_argument("--dest", default="/tmp/podres-demo-start",
                        help="scratch clone, removed first (default: %(default)s)")
    parser.add_argument("--cold", action="store_true",
                        help="install with empty throwaway pip and uv caches")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="give up after this many seconds (default: %(default)s)")
    parser.add_argument("--keep", action="store_true", help="leave the clone in place")
    return parser.parse_args(argv)


def _clone(repo: str, dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", repo, str(dest)], check=True)


def _watch(proc: subprocess.Popen[str], started: float) -> tuple[dict[str, float], str | None]:
    """Phase lengths in seconds as the markers go by, and the ``/metrics`` URL."""
    assert proc.stdout is not None
    phases: dict[str, float] = {}
    last = started
    pending = list(MARKERS)
    for line in proc.stdout:
        now = time.monotonic()
        sys.stderr.write(f"{now - started:7.2f}s  {line}")
        if pending and pending[0][1].search(line.rstrip()):
            name, _ = pending.pop(0)
            phases[name] = round(now - last, 2)
            last = now
            if not pending:
                return phases, line.split()[-1]
    return phases, None


def _stop(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C, as a user stops the demo; the demo then removes its temporary directory."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=20)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _size_mib(path: Path) -> float:
    total = sum(f.lstat().st_size for f in path.rglob("*") if not f.is_symlink() and f.is_file())
    return round(total / 2**20, 1)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    dest = Path(args.dest)
    _clone(args.repo, dest)
    env = dict(os.environ)
    cache = tempfile.mkdtemp(prefix="demo-cold-cache-") if args.cold else None
    if cache is not None:
        env["PIP_CACHE_DIR"] = f"{cache}/pip"
        env["UV_CACHE_DIR"] = f"{cache}/uv"
    started = time.monotonic()
    proc = subprocess.Popen(
        ["make", "demo", "ARGS=--web.listen-address 127.0.0.1:0"], cwd=dest, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
        start_new_session=True)
    # A run that hangs is stopped like one that finished: its output then ends.
    timer = threading.Timer(args.timeout, _stop, (proc,))
    timer.start()
    try:
        phases, url = _watch(proc, started)
        elapsed = round(time.monotonic() - started, 2)
    finally:
        timer.cancel()
        _stop(proc)
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    result = {"bench": "demo_start", "seconds": elapsed if url else None, "phases": phases,
              "url": url, "cache": "cold" if args.cold else "warm",
              "pyc_writes": not env.get("PYTHONDONTWRITEBYTECODE"),
              "venv_mib": _size_mib(dest / ".venv") if (dest / ".venv").exists() else None}
    if not args.keep:
        shutil.rmtree(dest, ignore_errors=True)
    print(json.dumps(result))
    return 0 if url else 1


if __name__ == "__main__":
    sys.exit(main())
