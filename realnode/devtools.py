"""The real-node test bed's own Go tools, built and run from Python (docs/real-node.md):

    python -m realnode.devtools         # builds both (ckptdump for every kubelet minor)

- ``realnode/deviceplugin``: a device plugin on the kubelet's own device plugin API that
  registers fake devices (GPUs, NICs, ...) with the NUMA affinity a test gives them;
- ``realnode/ckptdump``: the kubelet's checkpoint files read with the kubelet's own Go types
  (one build per kubelet minor), so that a test compares the exporter's ledger with files read
  independently of the exporter's parser.

Both are built into ``realnode/build/`` (ignored by git) with ``nice -n 10``, and rebuilt only
when the hash of their sources (``*.go``, the go.mod and go.sum) changes, as realnode/build.py
does for the kubelets.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.reference import go_binary
from realnode.build import BUILD, RealNodeUnavailable, _digest

HERE = Path(__file__).resolve().parent
# ckptdump's go.mod per kubelet minor: the same k8s.io pins as reference/kubelet's.
CKPTDUMP_MODFILES = {"1.36": "go.1_36.mod", "1.37": "go.mod"}
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"  # fixed in the kubelet (pluginapi)


class ToolUnavailable(RealNodeUnavailable):
    """A tool cannot be built here (no Go, or a build that fails); the reason is the text."""


def _build(src: Path, out: Path, modfile: str = "go.mod") -> Path:
    """``src``'s module built into ``out`` unless the stamp beside it holds the hash of its
    Go files, ``modfile`` and its go.sum (as realnode/build.py stamps the kubelets)."""
    inputs = [*sorted(src.glob("*.go")), src / modfile,
              src / (modfile.removesuffix(".mod") + ".sum")]
    stamp = out.with_name(out.name + ".sha256")
    digest = _digest(inputs, "")
    if out.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return out
    go = go_binary()
    if go is None:
        raise ToolUnavailable(f"no Go toolchain ('go' is not on PATH): {src.name} cannot be built")
    BUILD.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    cmd = ["nice", "-n", "10", go, "build", f"-modfile={modfile}", "-o", str(tmp), "."]
    done = subprocess.run(cmd, cwd=src, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise ToolUnavailable(f"building {src.name} failed:\n{done.stderr.strip()[-4000:]}")
    tmp.replace(out)  # a binary is complete or absent, even when two builds race
    stamp.write_text(digest + "\n")
    return out


def device_plugin_binary() -> Path:
    return _build(HERE / "deviceplugin", BUILD / "deviceplugin")


def ckptdump_binary(version: str) -> Path:
    if version not in CKPTDUMP_MODFILES:
        raise ToolUnavailable(f"ckptdump: unknown kubelet version {version!r} "
                              f"(one of {', '.join(CKPTDUMP_MODFILES)})")
    return _build(HERE / "ckptdump", BUILD / f"ckptdump-{version}",
                  CKPTDUMP_MODFILES[version])


def ckptdump(version: str, root_dir: str | Path, device_plugins_dir: str | Path | None = None,
             *, pod_level_resource_managers: bool = True) -> dict[str, Any]:
    """The kubelet ``version``'s checkpoints under ``root_dir`` (and the device manager's in
    ``device_plugins_dir``), as the kubelet's own types read them; an absent file is None."""
    cmd = [str(ckptdump_binary(version)), "--root-dir", str(root_dir),
           f"--pod-level-resource-managers={'true' if pod_level_resource_managers else 'false'}"]
    if device_plugins_dir is not None:
        cmd += ["--device-plugins-dir", str(device_plugins_dir)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"ckptdump failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


class DevicePlugin:
    """One running fake device plugin serving ``resources`` (a list of ``{"name",
    "preferredAllocation", "preferOrder", "devices": [{"id", "numa", "health"}]}``) in
    ``socket_dir``, the kubelet's device-plugin directory as seen from outside its mount
    namespace. ``start`` returns once every resource is registered with the kubelet."""

    def __init__(self, socket_dir: str | Path, resources: Sequence[Mapping[str, Any]],
                 log: str | Path | None = None) -> None:
        self.socket_dir = Path(socket_dir)
        self._work = Path(tempfile.mkdtemp(prefix="deviceplugin-"))
        self.config = self._work / "devices.json"
        self.log = Path(log) if log is not None else self._work / "events.jsonl"
        self.resources = [dict(r) for r in resources]
        self.proc: subprocess.Popen[bytes] | None = None

    def _write(self) -> None:
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(json.dumps({"resources": self.resources}))
        tmp.replace(self.config)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [r for r in rows if kind is None or r.get("event") == kind]

    def wait_registered(self, count: int, timeout: float = 30.0) -> None:
        """Until ``count`` registrations (of every resource) are in the log."""
        want = len(self.resources) * count
        end = time.monotonic() + timeout
        while len(self.events("registered")) < want:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"device plugin exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > end:
                raise TimeoutError(f"device plugin: {want} registrations not seen in "
                                   f"{timeout:.0f}s: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def start(self, timeout: float = 30.0) -> DevicePlugin:
        self._write()
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(device_plugin_binary()), "--socket-dir", str(self.socket_dir),
                 "--config", str(self.config)], stdout=out, stderr=subprocess.STDOUT)
        self.wait_registered(1, timeout)
        return self

    def reload(self, resources: Sequence[Mapping[str, Any]]) -> None:
        """New devices (same resource names), sent to the kubelet through ListAndWatch."""
        self.resources = [dict(r) for r in resources]
        self._write()
        if self.proc is not None:
            self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._work, ignore_errors=True)

    def __enter__(self) -> DevicePlugin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def metric_samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of the metric family ``name`` in a Prometheus exposition, by their
    sorted labels."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def main() -> int:
    t0 = time.monotonic()
    try:
        built = [device_plugin_binary(), *(ckptdump_binary(v) for v in CKPTDUMP_MODFILES)]
    except ToolUnavailable as exc:
        print(f"realnode: {exc}", file=sys.stderr)
        return 1
    print(f"realnode: {', '.join(p.name for p in built)} ready in {BUILD} "
          f"({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
