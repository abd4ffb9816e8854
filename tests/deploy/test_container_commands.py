"""What the deployed containers run, run here: every probe of every plain manifest and chart
template is asked of the command its container runs, and the ``kubectl exec`` commands of
docs/runbook.md (``doctor``, ``record``, ``history``) run with exactly the DaemonSet's
environment.

A container is started as a subprocess of the installed console script: its command (the
image's ENTRYPOINT when it has none) and args, and its environment with the downward API
filled in and each path it names under a mount replaced by the test's stand-in for that
mount (the simulated kubelet's socket directory, a fixture sysfs, a fresh history
directory). Nothing else is changed: a setting the manifests leave out or misspell shows
here as a failing probe or command."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from foundation.helpers import CLI, SCENARIOS

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "manifests"
CHART = ROOT / "deploy" / "helm" / "podres-exporter"
SYSFS = ROOT / "tests" / "foundation" / "data" / "sysfs" / "smt-2socket"
READY_TIMEOUT = 60.0
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is a dev dependency")


def _entrypoint() -> list[str]:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    (last,) = [line for line in lines if line.startswith("ENTRYPOINT")][-1:]
    return list(json.loads(last[len("ENTRYPOINT"):]))


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _workloads() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every DaemonSet and Deployment of the plain manifests (optional ones too) and of the
    chart, rendered with its defaults and with every option on."""
    for path in sorted(MANIFESTS.glob("*.yaml")) + sorted((MANIFESTS / "optional").glob(
            "*.yaml")):
        for doc in _docs(path.read_text()):
            if doc["kind"] in ("DaemonSet", "Deployment"):
                yield f"{path.relative_to(ROOT)}:{doc['metadata']['name']}", doc
    chart = helm.Chart.load(str(CHART))
    for label, values in (("defaults", {}), ("all-options", {
            "api": {"enabled": True}, "legacyProxyAuthz": True,
            "history": {"existingSecret": "podres-exporter-history"},
            "kubeletRoot": {"enabled": True}})):
        rendered = chart.render(values, name="podres-exporter", namespace="podres-system",
                                is_install=True)
        for path, text in sorted(rendered.items()):
            if path.endswith(".yaml"):
                for doc in _docs(text):
                    if doc["kind"] in ("DaemonSet", "Deployment"):
                        yield f"chart[{label}]:{doc['metadata']['name']}", doc


WORKLOADS = dict(_workloads())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Container:
    """A container of a manifest, run here: ``mounts`` maps each path inside the container
    the test provides to where it is here."""

    def __init__(self, spec: dict[str, Any], mounts: dict[str, str],
                 secrets: dict[tuple[str, str], str]) -> None:
        self.spec = spec
        self.port = _free_port()
        ports = {p["name"]: p["containerPort"] for p in spec.get("ports", [])}
        self.ports = ports
        self.mounts = dict(sorted(mounts.items(), key=lambda kv: -len(kv[0])))
        self.env = self._environment(secrets)

    def _translate(self, value: str) -> str:
        for inside, here in self.mounts.items():
            if value == inside or value.startswith(inside + "/"):
                return here + value[len(inside):]
            value = value.replace(inside, here)
        return value

    def _environment(self, secrets: dict[tuple[str, str], str]) -> dict[str, str]:
        downward = {"spec.nodeName": "worker-7", "status.hostIP": "127.0.0.1"}
        env: dict[str, str] = {}
        for var in self.spec.get("env", []):
            if "value" in var:
                # $(VAR) of a variable defined before it, as the kubelet expands it.
                value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), var["value"])
            elif "fieldRef" in var["valueFrom"]:
                value = downward[var["valueFrom"]["fieldRef"]["fieldPath"]]
            else:
                ref = var["valueFrom"]["secretKeyRef"]
                value = secrets[(ref["name"], ref["key"])]
            env[var["name"]] = value
        return {k: self._listen(self._translate(v)) for k, v in env.items()}

    def _listen(self, value: str) -> str:
        """A listen address ``:PORT`` of a container port becomes this test's port."""
        match = re.fullmatch(r":(\d+)", value)
        if match and int(match[1]) in self.ports.values():
            return f"127.0.0.1:{self.port}"
        return value

    def argv(self) -> list[str]:
        command = self.spec.get("command") or _entrypoint()
        assert command[0] == "podres-exporter", command
        args = [self._listen(self._translate(a)) for a in self.spec.get("args", [])]
        args = [re.sub(r"^(--web\.listen-address=)(:\d+)$",
                       lambda m: m[1] + self._listen(m[2]), a) for a in args]
        return [CLI, *command[1:], *args]

    def process_env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PODRES_")}
        return {**base, "GRPC_VERBOSITY": "ERROR", **self.env}

    def probe_port(self, probe: dict[str, Any]) -> int:
        port = probe["httpGet"]["port"]
        number = self.ports[port] if isinstance(port, str) else port
        assert number in self.ports.values(), f"probe port {port} is not a container port"
        return number


async def _status(session: aiohttp.ClientSession, url: str) -> int | None:
    try:
        async with session.get(url) as resp:
            await resp.read()
            return resp.status
    except aiohttp.ClientError:
        return None


async def _answers(proc: subprocess.Popen[bytes], url: str, want: int = 200) -> int | None:
    """Ask ``url`` until it answers ``want`` (a readiness probe waits for the first poll)
    or the bound passes; the last status."""
    status = None
    deadline = time.monotonic() + READY_TIMEOUT
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        while time.monotonic() < deadline and proc.poll() is None:
            status = await _status(session, url)
            if status == want:
                break
            await asyncio.sleep(0.2)
    return status


def _stop(proc: subprocess.Popen[bytes]) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode(errors="replace")


def _daemonset_mounts(sim: Any, short_tmp: Path, token: str) -> dict[str, str]:
    sa = short_tmp / "sa"
    sa.mkdir()
    (sa / "ca.crt").write_bytes(Path(sim.cert_path).read_bytes())
    (sa / "token").write_text(token + "\n")
    (short_tmp / "history").mkdir()
    (short_tmp / "cgroup").mkdir()  # no kubepods: the cgroup source says it is off
    return {
        "/var/lib/kubelet/pod-resources": str(Path(sim.socket_path).parent),
        "https://127.0.0.1:10250": str(sim.http_url),
        SA_DIR: str(sa),
        "/host/sys/fs/cgroup": str(short_tmp / "cgroup"),
        "/host/sys": str(SYSFS),
        "/var/lib/podres-exporter": str(short_tmp / "history"),
    }


async def _exec(container: Container, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl exec <pod> -- podres-exporter ARGS``: the container's environment, no
    flag added (run without blocking the loop the simulated kubelet answers on)."""
    proc = await asyncio.create_subprocess_exec(
        CLI, *args, env=container.process_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return subprocess.CompletedProcess(args, proc.returncode, out.decode(), err.decode())


DAEMONSETS = [name for name, w in WORKLOADS.items() if w["kind"] == "DaemonSet"]
DEPLOYMENTS = [name for name, w in WORKLOADS.items() if w["kind"] == "Deployment"]


def test_every_workload_is_covered() -> None:
    assert len(DAEMONSETS) >= 3 and len(DEPLOYMENTS) >= 2, sorted(WORKLOADS)
    for workload in WORKLOADS.values():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert {"livenessProbe", "readinessProbe"} <= set(container), container["name"]
    for name in DAEMONSETS:  # serve, which migrates its history before it listens
        for container in WORKLOADS[name]["spec"]["template"]["spec"]["containers"]:
            assert "startupProbe" in container, name


@pytest.mark.parametrize("name", DAEMONSETS)
async def test_daemonset_probes_and_exec_commands(name: str, start_sim: Any,
                                                  short_tmp: Path) -> None:
    token = "sa-token-for-the-test"
    sim = await start_sim(SCENARIOS / "sidecar-hybrid", http=True, token=token)
    (spec,) = WORKLOADS[name]["spec"]["template"]["spec"]["containers"]
    mounts = _daemonset_mounts(sim, short_tmp, token)
    if any(m["mountPath"] == "/host/var/lib/kubelet" for m in spec["volumeMounts"]):
        root = short_tmp / "kubelet-root"
        root.mkdir()
        mounts["/host/var/lib/kubelet"] = str(root)
    # With the api, the exporters write the fleet database named by the api's Secret: here a
    # SQLite file stands in for that PostgreSQL URL (the Secret's value, not the chart's).
    secrets = {("podres-exporter-history", "url"):
               f"sqlite:///{short_tmp / 'history' / 'fleet.db'}"}
    container = Container(spec, mounts, secrets)
    proc = subprocess.Popen(container.argv(), env=container.process_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = spec[kind]
            assert container.probe_port(probe) == container.ports["metrics"]
            url = f"http://127.0.0.1:{container.port}{probe['httpGet']['path']}"
            assert await _answers(proc, url) == 200, f"{kind} {url} of {name}"

        doctor = await _exec(container, "doctor", "--output", "json")
        assert doctor.returncode in (0, 1), doctor.stderr  # 2: could not read the node
        assert "--from" not in doctor.stderr and "Traceback" not in doctor.stderr
        report = json.loads(doctor.stdout)
        assert report, "doctor said nothing"

        record = await _exec(container, "record", str(short_tmp / "fixture"))
        assert record.returncode == 0, record.stderr
        written = sorted(p.name for p in (short_tmp / "fixture").iterdir())
        # The kubelet's /configz too (this scenario has no /pods): the URL, the CA and the
        # token reached record.
        assert {"list.json", "configz.json", "topology.json"} <= set(written), (written, record)

        deadline = time.monotonic() + READY_TIMEOUT
        while True:  # serve writes its first summary shortly after its first poll
            history = await _exec(container, "history", "events", "--since", "1h")
            if (history.returncode == 0 and history.stdout.strip()) or \
                    time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert history.returncode == 0, history.stderr
        assert history.stdout.strip(), history  # the events serve recorded
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", DEPLOYMENTS)
async def test_api_deployment_probes(name: str, short_tmp: Path) -> None:
    from exporter.history import open_store

    (spec,) = WORKLOADS[name]["spec"]["template"]["spec"]["containers"]
    url = f"sqlite:///{short_tmp / 'fleet.db'}"
    open_store(url).close()  # the fleet database the exporters write
    secrets = {(ref["name"], ref["key"]): url for var in spec.get("env", [])
               if "secretKeyRef" in var.get("valueFrom", {})
               for ref in [var["valueFrom"]["secretKeyRef"]]}
    assert secrets, "the api reads its database URL from a Secret"
    container = Container(spec, {}, secrets)
    proc = subprocess.Popen(container.argv(), env=container.process_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for kind in ("livenessProbe", "readinessProbe"):
            probe = spec[kind]
            container.probe_port(probe)
            path = probe["httpGet"]["path"]
            assert await _answers(proc, f"http://127.0.0.1:{container.port}{path}") == 200, \
                f"{kind} {path} of {name}"
    finally:
        err = _stop(proc)
    assert proc.returncode == 0, err
