"""The one path from raw inputs to a snapshot: whatever the optional parts hold, the
snapshot is built and the bad part is reported as its own source's error."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.assemble import snapshot_from_raw
from exporter.errors import SourceError
from exporter.rawnode import RawNode
from exporter.sources.fixture import load_fixture_dir
from foundation.helpers import SCENARIOS

BASE = load_fixture_dir(SCENARIOS / "database-pod-scope")
OPTIONAL = {("podresources", "GetAllocatableResources"), ("kubelet", "pods"),
            ("kubelet", "configz"), ("checkpoint", "parse")}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["items", "metadata", "spec", "containers", "name", "namespace",
                         "kubeletconfig", "resources", "reservedSystemCPUs", "featureGates",
                         "policyName", "entries", "podEntries", "defaultCpuSet", "data"]),
        inner, max_size=4),
    max_leaves=20)
bodies = st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode())


@settings(max_examples=200, deadline=None)
@given(pods=bodies, configz=bodies, allocatable=st.binary(max_size=32), cpu=bodies,
       memory=bodies)
def test_optional_parts_never_break_the_snapshot(pods: bytes, configz: bytes,
                                                 allocatable: bytes, cpu: bytes,
                                                 memory: bytes) -> None:
    raw = replace(BASE, pods=pods, configz=configz, allocatable=allocatable,
                  checkpoints=(("cpu_manager_state", cpu), ("memory_manager_state", memory)))
    assembled = snapshot_from_raw(raw, checkpoints=True)
    assert set(assembled.errors) <= OPTIONAL
    assert len(assembled.snapshot.pods) == 3
    assert assembled.snapshot.checkpoints is not None
    for key, exc in assembled.errors.items():
        assert (exc.source, exc.operation) == key
        assert "\n" not in str(exc)  # one log line, one CLI line


def test_typed_and_raw_forms_agree() -> None:
    again = BASE.kubelet.raw(BASE.topology, BASE.checkpoints)
    assert again.kubelet == BASE.kubelet
    one = snapshot_from_raw(BASE).snapshot
    assert snapshot_from_raw(again).snapshot == one


def test_a_raw_node_without_list_has_no_snapshot() -> None:
    with pytest.raises(SourceError, match="List"):
        snapshot_from_raw(RawNode(None))
    with pytest.raises(SourceError, match="undecodable"):
        snapshot_from_raw(RawNode(b"\xff\xff"))
