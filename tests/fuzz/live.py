"""A live node for fuzzing the read path end to end: the simulated kubelet (real gRPC on a
unix socket, real HTTPS for /pods and /configz) serving whatever bytes an example gives it,
the checkpoint files on disk, and the exporter's own reader and ``Exporter`` polling them.

Examples run synchronously (hypothesis drives them), so the node owns an event loop and
runs each poll to completion on it."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.rawnode import RawNode
from exporter.reader import NodeReader, SourceOptions
from exporter.service import Exporter, ServiceOptions
from exporter.sim.server import SimKubelet
from exporter.sources.fixture import load_fixture_dir

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"
BASE = SCENARIOS / "database-pod-scope"
CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoint" / "data"
PROMTOOL = "/usr/bin/promtool"
PROMTOOL_HINT = f"{PROMTOOL} not installed (Debian: apt-get install prometheus)"


class LiveNode:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="podres-fz-", dir="/tmp"))
        self.kubelet_root = self.root / "kubelet"
        self.kubelet_root.mkdir()
        self.base = load_fixture_dir(BASE)
        self.loop = asyncio.Runner()
        self.sim = SimKubelet(self.base, socket_path=str(self.root / "k.sock"),
                              http_listen="127.0.0.1:0")
        self.loop.run(self.sim.start())
        self.reader = NodeReader(SourceOptions(
            socket=self.sim.socket_path, timeout=5.0, kubelet_url=self.sim.http_url,
            ca_file=str(self.sim.cert_path), sysfs=None,
            topology_file=str(BASE / "topology.json"), kubelet_root=str(self.kubelet_root),
            node_name="fuzz-node"))
        self.exporter = Exporter(self.reader, ServiceOptions(poll_interval=3600.0))
        # Distinct /metrics bodies seen, for promtool at the end of a target.
        self.bodies: dict[int, str] = {}

    def poll(self, raw: RawNode, checkpoints: dict[str, bytes] | None = None) -> str:
        """Serve ``raw`` (and write ``checkpoints``), poll once, and return /metrics after
        checking that an independent parser reads it."""
        for name in ("cpu_manager_state", "memory_manager_state"):
            path = self.kubelet_root / name
            if checkpoints and name in checkpoints:
                tmp = path.with_name(name + ".tmp")
                tmp.write_bytes(checkpoints[name])
                os.replace(tmp, path)  # as the kubelet does: a new inode every write
            else:
                path.unlink(missing_ok=True)
        # The simulator serves every body as it is, malformed List and /configz included.
        self.sim.set_state(raw)
        self.loop.run(asyncio.wait_for(self.exporter.poll_once(), 30))
        body = b"".join(self.exporter.metrics_body()).decode("utf-8")
        families = {f.name for f in text_string_to_metric_families(body)}
        assert "podres_up" in families, body[:500]
        self.bodies.setdefault(hash(body), body)
        return body

    def check_promtool(self, limit: int = 8) -> None:
        """``promtool check metrics`` on up to ``limit`` of the distinct bodies served."""
        if not os.access(PROMTOOL, os.X_OK):
            pytest.skip(PROMTOOL_HINT)
        for body in list(self.bodies.values())[-limit:]:
            result = subprocess.run([PROMTOOL, "check", "metrics"], input=body, text=True,
                                    capture_output=True, timeout=60, check=False)
            # promtool lints too (exit 3 for lint warnings only would still be a problem).
            assert result.returncode == 0, result.stdout + result.stderr
        self.bodies.clear()

    def close(self) -> None:
        self.loop.run(self.reader.close())
        self.loop.run(self.sim.stop())
        self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)
