"""doctor against a live (simulated) kubelet over HTTPS and the PodResources socket."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _start_sim(tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], str, str]:
    sock = str(tmp / "kubelet.sock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter.cli", "sim", "--topology.shape", "1x4x2", "--socket", sock,
         "--http-listen", "127.0.0.1:0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, GRPC_VERBOSITY="ERROR"))
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        match = re.search(r"kubelet HTTPS on (https://\S+)", line)
        if match:
            return proc, match.group(1), sock
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("the simulated kubelet did not start: " + (proc.stderr.read()
                                                                   if proc.stderr else ""))


@pytest.fixture
def sims(short_tmp: Path) -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def _doctor(url: str, sock: str, tmp: Path) -> tuple[int, dict[str, str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "exporter.cli", "doctor", "--kubelet.url", url,
         "--kubelet.insecure-skip-verify", "--kubelet.token-file", str(tmp / "no-token"),
         "--podresources.socket", sock, "--output", "json"],
        capture_output=True, text=True, timeout=60,
        env=dict(os.environ, GRPC_VERBOSITY="ERROR"))
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, {c["name"]: c["status"] for c in report.get("checks", [])}


def test_live_ready_node(short_tmp: Path, sims: list[subprocess.Popen[str]]) -> None:
    proc, url, sock = _start_sim(short_tmp)
    sims.append(proc)
    code, checks = _doctor(url, sock, short_tmp)
    assert code == 0, checks
    assert checks["PodLevelResourceManagers gate"] == "pass"
    assert checks["reserved CPUs leave room"] == "pass"


def test_live_unready_node(short_tmp: Path, sims: list[subprocess.Popen[str]]) -> None:
    proc, url, sock = _start_sim(short_tmp, "--reporting", "1.35", "--topology-policy", "none")
    sims.append(proc)
    code, checks = _doctor(url, sock, short_tmp)
    assert code == 1
    assert checks["PodLevelResourceManagers gate"] == "fail"
    assert checks["topology manager policy"] == "fail"


def test_live_unreachable_kubelet(short_tmp: Path) -> None:
    code, checks = _doctor("https://127.0.0.1:1", str(short_tmp / "none.sock"), short_tmp)
    assert code == 2 and checks == {}


@pytest.mark.parametrize(("url", "reason"), [
    ("https://127.0.0.1:1", "Connection refused"),  # nothing listens on port 1
    ("https://nonexistent.invalid:10250", ""),  # a name that never resolves
])
def test_unreachable_kubelet_is_named_in_words(url: str, reason: str) -> None:
    """The connector's own text ended in "ssl:<ssl.SSLContext object at 0x…>"."""
    proc = subprocess.run([sys.executable, "-m", "exporter.cli", "doctor", "--kubelet.url", url],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert f"cannot connect to {url}: {reason}" in line
    assert "object at 0x" not in line and "SSLContext" not in line
