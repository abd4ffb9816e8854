"""Hostile answers from every source a live exporter reads, through the real clients: the
PodResources responses as random and mutated protobuf bytes over gRPC, /pods and /configz
over HTTPS, and both checkpoint files. The property: a poll never raises, a List that
decodes always yields a ledger (a bad optional source degrades only itself), /metrics stays
parseable, and promtool accepts it afterwards."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.errors import SourceError
from exporter.sources.podresources import decode_list
from fuzz.budget import fuzz, ran, timeout
from fuzz.inputs import json_values, mutated_bytes, mutated_json
from fuzz.live import CHECKPOINTS, LiveNode

pytestmark = pytest.mark.timeout(timeout(240))


@pytest.fixture(scope="module")
def node() -> Iterator[LiveNode]:
    live = LiveNode()
    yield live
    live.close()


def up_line(body: str) -> str:
    return next(line for line in body.splitlines() if line.startswith("podres_up "))


def test_list_responses(node: LiveNode) -> None:
    base = node.base.list_response or b""

    @fuzz(scale=0.7)
    @given(data=mutated_bytes(base))
    def example(data: bytes) -> None:
        ran("gRPC List bytes")
        body = node.poll(dataclasses.replace(node.base, list_response=data))
        try:
            decode_list(data)
        except SourceError:
            assert up_line(body) == "podres_up 0", up_line(body)
        else:
            assert up_line(body) == "podres_up 1", up_line(body)

    example()
    node.check_promtool()


def test_allocatable_responses(node: LiveNode) -> None:
    base = node.base.allocatable or b""

    @fuzz(scale=0.5)
    @given(data=mutated_bytes(base))
    def example(data: bytes) -> None:
        ran("gRPC GetAllocatableResources bytes")
        body = node.poll(dataclasses.replace(node.base, allocatable=data))
        assert up_line(body) == "podres_up 1", up_line(body)

    example()
    node.check_promtool()


def test_kubelet_bodies(node: LiveNode) -> None:
    pods = json.loads(node.base.pods or b"{}")
    configz = json.loads(node.base.configz or b"{}")

    @fuzz(scale=0.7)
    @given(which=st.sampled_from(["pods", "configz"]), data=st.data())
    def example(which: str, data: st.DataObject) -> None:
        ran("HTTPS /pods and /configz bodies")
        body_of = mutated_json(pods if which == "pods" else configz)
        raw = dataclasses.replace(node.base, **{which: data.draw(body_of)})
        body = node.poll(raw)
        assert up_line(body) == "podres_up 1", up_line(body)

    example()
    node.check_promtool()


CHECKPOINT_FILES = {
    "cpu_manager_state": [p.read_bytes() for p in sorted(CHECKPOINTS.glob("cpu_*"))],
    "memory_manager_state": [p.read_bytes() for p in sorted(CHECKPOINTS.glob("mem_*"))],
}


@st.composite
def checkpoint_file(draw: st.DrawFn, name: str) -> bytes:
    original = draw(st.sampled_from(CHECKPOINT_FILES[name]))
    how = draw(st.sampled_from(["json", "bytes", "fresh"]))
    if how == "json":
        return draw(mutated_json(json.loads(original)))
    if how == "bytes":
        return draw(mutated_bytes(original))
    return json.dumps(draw(json_values)).encode()


def test_checkpoint_files(node: LiveNode) -> None:
    @fuzz(scale=0.7)
    @given(cpu=st.none() | checkpoint_file("cpu_manager_state"),
           memory=st.none() | checkpoint_file("memory_manager_state"))
    def example(cpu: bytes | None, memory: bytes | None) -> None:
        ran("checkpoint files (live)")
        files = {name: data for name, data in (("cpu_manager_state", cpu),
                                               ("memory_manager_state", memory))
                 if data is not None}
        body = node.poll(node.base, files)
        assert up_line(body) == "podres_up 1", up_line(body)

    example()
    node.check_promtool()


def test_sim_serves_malformed_list(node: LiveNode) -> None:
    node.sim.set_state(dataclasses.replace(node.base, list_response=b"\x00"))
    assert node.sim.raw.list_response == b"\x00"


def test_sim_serves_any_configz(node: LiveNode) -> None:
    configz = b'{"kubeletconfig": {"featureGates": {"\\ud800": true}}}'
    node.sim.set_state(dataclasses.replace(node.base, configz=configz, metrics=None))
    assert node.sim.raw.configz == configz
