"""What the tests of a live node's reading share (test_fetch, test_ledger_cache,
test_reader; their ``reader_for`` fixture is in conftest.py): scenarios and hostile bodies."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from exporter.sources.fixture import load_fixture_dir
from foundation.helpers import SCENARIOS

DB = SCENARIOS / "database-pod-scope"
HYBRID = SCENARIOS / "sidecar-hybrid"
DEEP = b"[" * 100_000 + b"]" * 100_000
HUGE = b"9" * 5000


def hostile(part: str, body: bytes) -> Any:
    """The DB scenario with one raw part replaced by ``body`` (and /metrics of its own:
    the simulator derives it from a well-formed /configz only)."""
    return replace(load_fixture_dir(DB), metrics=b"# no gates\n", **{part: body})
