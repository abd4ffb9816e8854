"""Fixtures shared by every test directory: short temporary directories for unix sockets and
a running simulated kubelet (real gRPC on a unix socket, optional real HTTPS)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# gRPC's C core logs reconnect attempts to stderr; tests assert on stderr contents.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "tests" / "data" / "scenarios"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A fresh directory under /tmp, short enough for a unix socket path (≤ 107 bytes)."""
    path = tempfile.mkdtemp(prefix="podres-", dir="/tmp")
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


StartSim = Callable[..., Awaitable[Any]]


@pytest.fixture
async def start_sim(short_tmp: Path) -> AsyncIterator[StartSim]:
    """``await start_sim(state_or_fixture_dir, http=False, token=None, misbehaviour=None)``
    starts a ``SimKubelet`` on ``<short_tmp>/kubelet.sock`` (HTTPS on an ephemeral port when
    ``http``); every simulator started is stopped at teardown."""
    from exporter.rawnode import KubeletState, RawNode
    from exporter.sim.server import SimKubelet
    from exporter.sources.fixture import load_fixture_dir

    sims: list[SimKubelet] = []

    async def start(state: KubeletState | RawNode | str | Path, *, http: bool = False,
                    token: str | None = None, misbehaviour: Any = None,
                    socket_name: str = "kubelet.sock") -> SimKubelet:
        if isinstance(state, str | Path):
            state = load_fixture_dir(state)
        sim = SimKubelet(state, socket_path=str(short_tmp / socket_name),
                         http_listen="127.0.0.1:0" if http else None, token=token,
                         misbehaviour=misbehaviour)
        await sim.start()
        sims.append(sim)
        return sim

    try:
        yield start
    finally:
        for sim in sims:
            await sim.stop()
