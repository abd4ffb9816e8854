"""Every source read once per poll (exporter.fetch) against the simulated kubelet: concurrently,
optional sources failing softly (malformed optional input degrades its own source, never the
poll), the schedules of /metrics and /pods, and recovery after an outage."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest

from exporter.assemble import snapshot_from_raw
from exporter.errors import SourceError
from exporter.pb import api_pb2
from exporter.rawnode import PackedBody, body_bytes, unpacked
from exporter.sim.server import Misbehaviour
from exporter.sources.fixture import KubeletState, load_fixture_dir
from exporter.sources.pod_list import reduce_pod_list
from foundation.reading import DB, DEEP, HUGE, HYBRID, hostile
from reconciler.reconcile import reconcile


async def test_optional_kubelet_failures_are_errors_not_exceptions(start_sim: Any,
                                                                   reader_for: Any) -> None:
    sim = await start_sim(DB, http=True, misbehaviour=Misbehaviour(
        forbidden_paths={"/pods", "/configz", "/metrics"}))
    reader = reader_for(sim)
    reading = await reader.read()
    assert set(reading.errors) == {("kubelet", "pods"), ("kubelet", "configz"),
                                   ("kubelet", "metrics")}
    assert all("HTTP 403" in m for m in reading.errors.values())
    assert {p.estimate_basis for p in reading.ledger.pods} == {"podresources"}


@pytest.mark.parametrize(("part", "body", "reason"), [
    ("pods", b"{broken", "invalid JSON"),
    ("pods", b'{"kind": "PodList", "items": [{"metadata": {"name": "a", "namespace": "b"}, '
             b'"spec": {"containers": 5}}]}', "malformed document"),
    ("pods", b'{"items": [{"metadata": 7}]}', ""),
    ("pods", DEEP, "nested too deeply"),
    ("pods", b'{"items": [{"metadata": {"uid": ' + HUGE + b"}}]}", "digits"),
    ("pods", b"[]", "expected a JSON object"),
    ("configz", b'{"kubeletconfig": {"reservedSystemCPUs": ' + HUGE + b"}}", "digits"),
    ("configz", b'{"kubeletconfig": {"reservedSystemCPUs": "0-' + HUGE + b'"}}', ""),
    ("configz", b'{"kubeletconfig": 5}', "not an object"),
    ("configz", b'{"kubeletconfig": ' + DEEP + b"}", "nested too deeply"),
])
async def test_malformed_kubelet_bodies_degrade_only_the_kubelet(
        part: str, body: bytes, reason: str, start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(hostile(part, body), http=True)
    reader = reader_for(sim)
    for _ in range(2):  # and again on the unchanged bytes: still failing
        reading = await reader.read()
        assert set(reading.errors) == {("kubelet", part)}, reading.errors
        assert reason in reading.errors[("kubelet", part)]
        assert len(reading.errors[("kubelet", part)]) < 600  # one line, not a dump
        assert len(reading.ledger.pods) == 3  # PodResources still reconciled
    if part == "pods":
        assert {p.estimate_basis for p in reading.ledger.pods} == {"podresources"}
    else:
        assert "cpu_manager_policy" not in dict(reading.ledger.kubelet)


async def test_fields_the_exporter_does_not_read_are_not_judged(start_sim: Any,
                                                                reader_for: Any) -> None:
    """/pods is decoded only as far as the exporter reads it: a value no JSON parser here
    would build (a 5000-digit number) in a field it never reads costs nothing and is no
    error, while the fields it reads are judged as before."""
    pod_list = load_fixture_dir(DB).kubelet.pod_list
    assert pod_list is not None
    body = json.dumps(pod_list).encode()
    hostile_body = body[:-1] + b', "x": ' + HUGE + b"}"
    sim = await start_sim(hostile("pods", hostile_body), http=True)
    reading = await reader_for(sim).read()
    assert reading.errors == {}
    assert {p.estimate_basis for p in reading.ledger.pods} == {"spec"}


async def test_garbage_from_allocatable_degrades_only_that_call(start_sim: Any,
                                                                reader_for: Any) -> None:
    good = load_fixture_dir(DB)
    sim = await start_sim(replace(good, allocatable=b"\xff\xff\xff garbage"), http=True)
    reader = reader_for(sim)
    reading = await reader.read()
    assert set(reading.errors) == {("podresources", "GetAllocatableResources")}
    assert "undecodable" in reading.errors[("podresources", "GetAllocatableResources")]
    without = load_fixture_dir(DB).kubelet
    sim.set_state(replace(without, allocatable=None))
    # The same pools as from a kubelet that has no allocatable to give.
    lacking = (await reader.read()).ledger
    assert (lacking.cpu_pools, lacking.containers) == (reading.ledger.cpu_pools,
                                                       reading.ledger.containers)
    sim.set_state(good)
    healed = await reader.read()
    assert healed.errors == {} and healed.ledger != reading.ledger


async def test_sources_are_read_concurrently(start_sim: Any, reader_for: Any) -> None:
    """A hung kubelet costs one deadline per poll: its three HTTPS questions are asked at
    once, not one after another."""
    sim = await start_sim(DB, http=True, misbehaviour=Misbehaviour(delay=30.0))
    reader = reader_for(sim, timeout=0.5)
    poll = await reader.poll()
    assert sim.http_peak == 3
    assert poll.reading is None
    assert {("podresources", "List"), ("podresources", "GetAllocatableResources"),
            ("kubelet", "pods"), ("kubelet", "configz"), ("kubelet", "metrics")} \
        == set(poll.errors) == poll.observed
    assert all("0.5s" in message for message in poll.errors.values())


async def test_list_failure_still_reports_every_other_source(start_sim: Any,
                                                             reader_for: Any) -> None:
    sim = await start_sim(hostile("configz", b"{oops"), http=True,
                          misbehaviour=Misbehaviour(forbidden_paths={"/pods"}))
    reader = reader_for(sim)
    await sim.stop_grpc()
    poll = await reader.poll()
    assert poll.reading is None and poll.failure is not None
    assert set(poll.errors) == {("podresources", "List"),
                                ("podresources", "GetAllocatableResources"),
                                ("kubelet", "pods"), ("kubelet", "configz")}
    assert "HTTP 403" in poll.errors[("kubelet", "pods")]
    assert "invalid JSON" in poll.errors[("kubelet", "configz")]


async def test_metrics_outcome_stands_between_reads(start_sim: Any, reader_for: Any) -> None:
    """/metrics is read every metrics_interval: a failure stays a failure until the next
    read, but is counted only by the poll that saw it."""
    misbehaviour = Misbehaviour(forbidden_paths={"/metrics"})
    sim = await start_sim(DB, http=True, misbehaviour=misbehaviour)
    reader = reader_for(sim, metrics_interval=100.0)
    first = await reader.poll(now=1000.0)
    assert first.observed == {("kubelet", "metrics")} == set(first.errors)
    misbehaviour.forbidden_paths.clear()
    between = await reader.poll(now=1050.0)
    assert set(between.errors) == {("kubelet", "metrics")} and between.observed == set()
    after = await reader.poll(now=1100.0)
    assert after.errors == {} and after.observed == set()
    assert after.reading is not None and after.reading.raw.metrics is not None


async def test_unimplemented_allocatable_is_asked_again_after_a_restart(
        start_sim: Any, reader_for: Any) -> None:
    """A kubelet upgrade that starts serving GetAllocatableResources: seen at the first
    poll after the restart (a new socket file), not after the exporter's restart."""
    misbehaviour = Misbehaviour(unimplemented={"GetAllocatableResources"})
    sim = await start_sim(DB, misbehaviour=misbehaviour)
    reader = reader_for(sim)
    before = (await reader.read()).ledger
    assert dict(before.kubelet)["rpcs_unimplemented"] == "GetAllocatableResources"
    assert before.cpu_pools.reserved == 0
    misbehaviour.unimplemented.clear()
    assert (await reader.read()).ledger is before  # remembered while the kubelet is the same
    await sim.restart_grpc()
    after = (await reader.read()).ledger
    assert "rpcs_unimplemented" not in dict(after.kubelet)
    assert after.cpu_pools.reserved > 0


@pytest.mark.timeout(60)
async def test_reader_recovers_after_a_kubelet_outage(start_sim: Any, reader_for: Any) -> None:
    """The socket goes away (kubelet down) and comes back as a new file: the same reader
    reads again, without being recreated."""
    import asyncio

    sim = await start_sim(HYBRID)
    reader = reader_for(sim, folder=HYBRID)
    before = (await reader.read()).ledger
    await sim.stop_grpc()
    with pytest.raises(SourceError, match="does not exist"):
        await reader.read()
    await sim.start_grpc()
    for _ in range(100):  # bounded: the channel redials with a backoff of at most 2 s
        try:
            reading = await reader.read()
            break
        except SourceError:
            await asyncio.sleep(0.1)
    else:
        raise AssertionError("the reader never read the restarted kubelet")
    assert reading.ledger == before


async def test_pods_is_read_when_list_changes_or_its_refresh_is_due(start_sim: Any,
                                                                    reader_for: Any) -> None:
    """A kubelet's /pods is ~10 KB a pod: it is read when PodResources shows a change (a
    new pod is known with its spec in the same poll) or every pods_interval, not on every
    poll."""
    base = load_fixture_dir(DB).kubelet
    no_specs = KubeletState(base.list_response, base.allocatable, {"items": []},
                            base.configz)
    sim = await start_sim(no_specs.raw(), http=True)
    reader = reader_for(sim, pods_interval=100.0)
    t0 = float(int(time.monotonic()))  # whole seconds: t0 + 100.0 - t0 is exactly 100.0
    first = await reader.read(t0)
    assert sim.http_requests["/pods"] == 1
    assert {p.estimate_basis for p in first.ledger.pods} == {"podresources"}
    # The specs appear, PodResources unchanged: not read before the refresh is due.
    sim.set_state(base)
    for step in (1.0, 2.0, 50.0):
        assert not (await reader.read(t0 + step)).changed
    assert sim.http_requests["/pods"] == 1
    # One pod fewer in List: /pods is read in that same poll, and its specs are used.
    fewer = api_pb2.ListPodResourcesResponse()
    fewer.CopyFrom(base.list_response)
    del fewer.pod_resources[0]
    sim.set_state(replace(base, list_response=fewer))
    changed = await reader.read(t0 + 51.0)
    assert sim.http_requests["/pods"] == 2
    assert len(changed.ledger.pods) == len(first.ledger.pods) - 1
    assert {p.estimate_basis for p in changed.ledger.pods} == {"spec"}
    # Nothing new: the refresh is counted from that read.
    await reader.read(t0 + 140.0)
    assert sim.http_requests["/pods"] == 2
    await reader.read(t0 + 151.0)
    assert sim.http_requests["/pods"] == 3


async def test_pods_read_again_unchanged_keeps_the_bytes_held(start_sim: Any,
                                                              reader_for: Any) -> None:
    """A refresh that finds the same pods hands on the bytes already held, so that a cache
    keyed by the last body (the kernel's) never keeps a second copy; changed pods replace
    them."""
    sim = await start_sim(DB, http=True)
    reader = reader_for(sim, pods_interval=10.0)
    t0 = float(int(time.monotonic()))
    first = await reader.read(t0)
    again = await reader.read(t0 + 10.0)
    assert sim.http_requests["/pods"] == 2
    assert first.raw.pods is not None and again.raw.pods is first.raw.pods
    base = load_fixture_dir(DB).kubelet
    assert base.pod_list is not None
    sim.set_state(replace(base, pod_list={**base.pod_list, "items": base.pod_list["items"][1:]}))
    changed = await reader.read(t0 + 20.0)
    assert sim.http_requests["/pods"] == 3
    assert changed.raw.pods is not None and changed.raw.pods != first.raw.pods


async def test_a_failed_pods_read_stands_until_the_next_read(start_sim: Any,
                                                             reader_for: Any) -> None:
    """A /pods failure is reported on every poll until /pods is read again, and counted
    (observed) only by the poll that read it."""
    sim = await start_sim(DB, http=True, misbehaviour=Misbehaviour(forbidden_paths={"/pods"}))
    reader = reader_for(sim, pods_interval=100.0)
    t0 = float(int(time.monotonic()))  # whole seconds: t0 + 100.0 - t0 is exactly 100.0
    first = await reader.poll(t0)
    assert ("kubelet", "pods") in first.errors and ("kubelet", "pods") in first.observed
    later = await reader.poll(t0 + 5.0)
    assert "HTTP 403" in later.errors[("kubelet", "pods")]
    assert ("kubelet", "pods") not in later.observed
    sim.misbehaviour.forbidden_paths.clear()
    healed = await reader.poll(t0 + 100.0)
    assert ("kubelet", "pods") not in healed.errors
    assert healed.reading is not None and healed.reading.changed
    assert {p.estimate_basis for p in healed.reading.ledger.pods} == {"spec"}


async def test_pods_is_held_deflated_and_reads_back_as_reduced(start_sim: Any,
                                                              reader_for: Any) -> None:
    """Between polls the reduced /pods is held deflated (a sixth of its size on the
    bench's node): it reads back as the reduced body, and the ledger and the typed
    answers are exactly what plain bytes give."""
    sim = await start_sim(DB, http=True)
    reader = reader_for(sim)
    reading = await reader.read()
    held = reading.raw.pods
    assert isinstance(held, PackedBody)
    body = sim.state.raw().pods
    assert body is not None and unpacked(held) == reduce_pod_list(bytearray(body))
    assert len(held.packed) < len(held) == len(unpacked(held))
    plain = replace(reading.raw, pods=unpacked(held))
    assert reconcile(snapshot_from_raw(plain, "node-a").snapshot) == reconcile(
        snapshot_from_raw(reading.raw, "node-a").snapshot)
    assert reading.raw.kubelet == plain.kubelet


def test_packed_bodies_compare_by_their_bytes() -> None:
    a, b = PackedBody(b'{"items":[1]}'), PackedBody(b'{"items":[1]}')
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != PackedBody(b'{"items":[2]}') and a != b'{"items":[1]}'
    assert body_bytes(a) == b'{"items":[1]}' and body_bytes(None) is None
    assert body_bytes(b"x") == b"x"


def test_a_body_has_one_digest_held_plain_or_deflated() -> None:
    """The ledger cache knows a /pods body by its content: held deflated (a live read) or
    plain (a fixture), the same bytes give the same key, other bytes another."""
    from exporter.ledger_cache import LedgerByContent
    from exporter.rawnode import RawNode

    cache = LedgerByContent("n1", checkpoints=False)
    body = b'{"items":[1]}'
    plain = cache.key(RawNode(b"", pods=body), 0, b"")
    assert cache.key(RawNode(b"", pods=PackedBody(body)), 0, b"") == plain
    assert cache.key(RawNode(b"", pods=PackedBody(b'{"items":[2]}')), 0, b"") != plain
