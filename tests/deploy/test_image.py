"""The image as CI builds it (deploy/image/build.sh, docs/deploy.md#1-build-the-image) and
runs it (deploy/image/run.py: the image's user, environment and entry point, a read-only
root): ``--version``, the demo answering from inside, non-root, read-only, nothing to build
or fetch with. The image is the OCI layout named by PODRES_IMAGE_OCI (``.ci/run`` builds it
and sets it); without it those tests skip, and with PODRES_REQUIRE_IMAGE=1 they fail.

The settings the image and the Dockerfile share are checked on every run, image or not."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.image_layout import built_layout

ROOT = Path(__file__).resolve().parents[2]
RUN = [sys.executable, str(ROOT / "deploy" / "image" / "run.py")]
CONFIG = json.loads((ROOT / "deploy" / "image" / "config.json").read_text())
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _dockerfile() -> dict[str, list[str]]:
    """The runtime stage's instructions (after the last FROM), continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines()
                                          if not line.lstrip().startswith("#")))
    stage = re.split(r"^FROM .*$", text, flags=re.M)[-1]
    out: dict[str, list[str]] = {}
    for line in stage.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.setdefault(word, []).append(rest.strip())
    return out


def test_build_script_and_dockerfile_give_the_image_the_same_settings() -> None:
    docker = _dockerfile()
    assert json.loads(docker["ENTRYPOINT"][-1]) == CONFIG["Entrypoint"]
    assert docker["USER"][-1] == CONFIG["User"]
    assert [f"{p}/tcp" for p in docker["EXPOSE"]] == list(CONFIG["ExposedPorts"])
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(docker["ENV"])))
    for item in CONFIG["Env"]:
        key, value = item.split("=", 1)
        assert env.get(key, "").replace("$PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                        "/usr/bin:/sbin:/bin") == value, key
    labels = dict(re.findall(r'([\w.]+)="([^"]*)"', " ".join(docker["LABEL"])))
    assert labels == CONFIG["Labels"]
    # The same commands fill /opt/venv: the Dockerfile runs install.sh, as build.sh does.
    assert "deploy/image/install.sh /usr/local/lib/podres-install.sh" in docker["COPY"]
    assert any(run.startswith("sh /usr/local/lib/podres-install.sh /") for run in docker["RUN"])
    assert "install.sh" in (ROOT / "deploy" / "image" / "build.sh").read_text()


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    uid, _, gid = CONFIG["User"].partition(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) != 0 and int(gid) != 0


@pytest.fixture(scope="module")
def layout() -> Path:
    return built_layout()


def _run(layout: Path, *args: str, entrypoint: str | None = "podres-exporter",
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [*RUN, str(layout)]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    return subprocess.run([*cmd, "--", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def _config(layout: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "deploy" / "image"))
    try:
        import run  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    config: dict[str, Any] = run.image(layout)[1]
    return config


def test_image_config_is_the_build_scripts(layout: Path) -> None:
    config = _config(layout)
    assert config["config"] == CONFIG
    assert config["os"] == "linux" and config["architecture"] == "amd64"


def test_version_inside_the_image(layout: Path) -> None:
    done = _run(layout, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"podres-exporter {VERSION}"


def test_entry_point_is_serve(layout: Path) -> None:
    done = _run(layout, "--help", entrypoint=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: podres-exporter serve")


CHECKS = r"""
import errno, os, shutil, sys, sysconfig
assert os.getuid() != 0 and os.geteuid() != 0 and os.getgid() != 0, os.getuid()
for path in ("/probe", "/opt/venv/probe", "/etc/probe", os.path.dirname(os.__file__) + "/p"):
    try:
        open(path, "w")
    except OSError as exc:
        assert exc.errno in (errno.EROFS, errno.EACCES), (path, exc)
    else:
        sys.exit(f"{path}: writable")
open("/tmp/probe", "w").write("ok")  # the emptyDir the manifests mount
for tool in ("gcc", "cc", "g++", "make", "apt-get", "pip", "pip3", "curl", "wget"):
    assert shutil.which(tool) is None, tool
import importlib.util
assert importlib.util.find_spec("pip") is None, "pip in the image"
for cache in ("/root/.cache", "/var/cache/apt/archives", "/var/lib/apt/lists"):
    assert not os.path.exists(cache) or not any(os.scandir(cache)), cache
print("ok", sys.version.split()[0])
"""


def test_non_root_read_only_root_no_build_tools(layout: Path) -> None:
    done = _run(layout, CHECKS, entrypoint="python3 -c")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok 3.11.")


def _get(url: str, deadline: float) -> bytes:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body: bytes = resp.read()
                return body
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def test_demo_inside_the_image(layout: Path) -> None:
    """The demo, run as the image's user on its read-only root, answers on the host's
    loopback: the CPU map, /metrics with podres_up 1, the ledger."""
    proc = subprocess.Popen(
        [*RUN, str(layout), "--entrypoint", "podres-exporter", "--", "demo",
         "--web.listen-address=127.0.0.1:0", "--poll.interval", "1s", "--duration", "120s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = next((line.split()[-1].rstrip("/") for line in proc.stdout
                    if "CPU map and links" in line), None)
        assert url, proc.stderr.read() if proc.stderr else ""
        deadline = time.monotonic() + 60
        assert b"<html" in _get(url + "/", deadline).lower()
        metrics = _get(url + "/metrics", deadline).decode()
        while not re.search(r"^podres_up 1$", metrics, re.M) and time.monotonic() < deadline:
            time.sleep(0.5)  # the first poll may not have ended yet
            metrics = _get(url + "/metrics", deadline).decode()
        assert re.search(r"^podres_up 1$", metrics, re.M), metrics[-800:]
        ledger = json.loads(_get(url + "/api/v1/ledger", deadline))
        assert ledger["node"]["name"] == "demo-node"
        # The banner's runbook link resolves in the wheel the image installed.
        from exporter.commands.demo import RUNBOOK_ANCHOR

        assert f'id="{RUNBOOK_ANCHOR}"' in _get(url + "/runbook", deadline).decode()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err
