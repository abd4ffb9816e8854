"""bench.demo_start splits ``make demo``'s output into phases by the recipe lines the
Makefile echoes: its markers must keep matching them (no install is run here)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundation.helpers import REPO

if str(REPO) not in sys.path:  # bench/ is run from the checkout (python -m bench.demo_start)
    sys.path.insert(0, str(REPO))

from bench import demo_start

URL_LINES = ["podres-exporter demo: simulated kubelet: 32 CPUs",
             "  CPU map and links   http://127.0.0.1:40000/",
             "  metrics             http://127.0.0.1:40000/metrics"]


def _echo(lines: list[str]) -> subprocess.Popen[str]:
    """A process printing ``lines``, as make and the demo print them."""
    return subprocess.Popen([sys.executable, "-c", "import sys; print(sys.argv[1])",
                             "\n".join(lines)], stdout=subprocess.PIPE, text=True)


def _recipe(tmp_path: Path) -> list[str]:
    """What ``make demo`` runs on a fresh clone, as make echoes it (``-n``: nothing runs)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed (Debian package make)")
    out = subprocess.run(["make", "-n", "-C", str(REPO), "demo", f"VENV={tmp_path}/venv"],
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if not line.startswith("make")]


def test_markers_split_the_makefiles_demo_run(tmp_path: Path) -> None:
    proc = _echo([*_recipe(tmp_path), *URL_LINES])
    started = time.monotonic()
    phases, url = demo_start._watch(proc, started)
    proc.wait()
    assert list(phases) == ["setup", "install", "start"]
    assert url == "http://127.0.0.1:40000/metrics"


def test_no_url_line_means_no_figure(tmp_path: Path) -> None:
    """A demo that fails before its URLs leaves the last phase open and no URL."""
    proc = _echo([*_recipe(tmp_path), "podres-exporter demo: error: address in use"])
    started = time.monotonic()
    phases, url = demo_start._watch(proc, started)
    proc.wait()
    assert list(phases) == ["setup", "install"]
    assert url is None
