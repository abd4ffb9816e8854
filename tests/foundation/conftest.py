"""Shared by the tests of a live node's reading (test_fetch, test_ledger_cache, test_reader):
a reader per simulated kubelet, closed after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from exporter.reader import NodeReader, SourceOptions
from foundation.reading import DB


@pytest.fixture
async def reader_for() -> AsyncIterator[Callable[..., NodeReader]]:
    readers: list[NodeReader] = []

    def make(sim: Any, folder: Path = DB, **kw: Any) -> NodeReader:
        options = SourceOptions(socket=sim.socket_path, sysfs=None,
                                topology_file=str(folder / "topology.json"), token_file=None,
                                **kw)
        if sim.http_url and "kubelet_url" not in kw:
            options = replace(options, kubelet_url=sim.http_url, ca_file=str(sim.cert_path))
        reader = NodeReader(options)
        readers.append(reader)
        return reader

    yield make
    for r in readers:
        await r.close()
