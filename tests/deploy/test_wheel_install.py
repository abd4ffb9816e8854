"""``pip install .`` as the README gives it: the wheel built from this tree, installed in a
fresh virtual environment outside the checkout, runs ``podres-exporter demo`` (which needs
the package data: the demo workload, the web page's static files, the history migrations).

uv (in the development venv) builds and installs; the dependencies come from its cache,
filled by ``make venv`` (``--offline``), so the test needs no network."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")
DEMO_SECONDS = 60  # the demo's own --duration: the test stops it sooner
READY_TIMEOUT = 120.0


def _run(*cmd: str | Path, cwd: Path) -> None:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{cmd[:3]} failed:\n{done.stdout}\n{done.stderr}"


def _get(url: str) -> bytes:
    """The body of ``url``, asked again while it answers 503 (no poll yet: the URLs are
    printed as the server starts)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``podres-exporter`` command of a fresh venv holding only the built wheel."""
    if not UV.exists():
        pytest.skip("uv is not in the development venv (make venv installs it)")
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy of the tracked sources: the wheel must not depend on what happens
    # to lie in the working tree (build/, caches), nor leave a build/ behind in it.
    src = tmp / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    for extra in ("LICENSE", "pyproject.toml"):  # possibly not committed yet
        shutil.copy2(REPO / extra, src / extra)
    _run(UV, "build", "--wheel", "--out-dir", tmp / "dist", src, cwd=tmp)
    wheels = list((tmp / "dist").glob("podres_exporter-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp / "venv"
    _run(UV, "venv", "--quiet", "--python", sys.executable, venv, cwd=tmp)
    _run(UV, "pip", "install", "--quiet", "--offline", "--python", venv / "bin" / "python",
         wheels[0], cwd=tmp)
    return venv / "bin" / "podres-exporter"


def test_wheel_holds_license_and_package_data(installed: Path) -> None:
    site = next(installed.parent.parent.glob("lib/python3*/site-packages"))
    assert (site / "exporter" / "demo" / "workload.yaml").is_file()
    assert (site / "exporter" / "web" / "static" / "index.html").is_file()
    assert (site / "exporter" / "web" / "runbook.md").is_file()  # served at /runbook
    assert sorted(p.name for p in (site / "exporter/history/migrations/versions").glob(
        "0*.py")), "no history migrations"
    licences = list(site.glob("podres_exporter-*.dist-info/licenses/LICENSE"))
    assert licences and "Apache License" in licences[0].read_text()


def test_installed_demo_serves(installed: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
    env.pop("PYTHONPATH", None)  # nothing from the checkout
    proc = subprocess.Popen([str(installed), "demo", "--web.listen-address", "127.0.0.1:0",
                             "--poll.interval", "1s", "--duration", f"{DEMO_SECONDS}s"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = None
        deadline = time.monotonic() + READY_TIMEOUT
        assert proc.stdout is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            found = re.search(r"metrics\s+(http://\S+)/metrics", line)
            url = found.group(1) if found else None
        assert url, f"no URL from the demo; stderr:\n{proc.stderr.read() if proc.stderr else ''}"
        assert b"podres_up 1" in _get(url + "/metrics")
        assert b"<html" in _get(url + "/").lower()  # the static page
        assert _get(url + "/static/style.css")
        assert b'id="podresexporterdown"' in _get(url + "/runbook")
        ledger = json.loads(_get(url + "/api/v1/ledger"))
        assert ledger["pods"], "the demo workload placed no pod"
        nodes = json.loads(_get(url + "/api/v1/nodes"))  # history: the migrations ran
        assert nodes
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
