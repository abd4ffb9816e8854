"""The published state (exporter.published.PublishedState), what scrapes and the API read: the
scrape body reused while nothing changed and only then, source health and error counts from
each poll's outcome, readiness and staleness by the clock, the CPU load only when its source
is on."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import pytest

from exporter.assemble import assemble
from exporter.metrics.compression import Encoding
from exporter.published import PublishedState
from exporter.reader import NodeReader, SourceOptions
from exporter.service import Exporter
from reconciler.enforcement import EnforcedCpusets
from reconciler.reconcile import reconcile
from tests.service.conftest import (
    parse_exposition,
    value,
)

PATHS = ("/metrics", "/api/v1/ledger", "/api/v1/cpumap")


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_a_cached_body_follows_the_self_metrics(short_tmp: Path, encoding: Encoding) -> None:
    """Scrapes reuse the body while nothing changed, and only then: the exporter's
    counters are updated in place."""
    exporter = Exporter(NodeReader(SourceOptions(socket=str(short_tmp / "none.sock"),
                                                 sysfs=None)))

    def errors() -> float | None:
        body = b"".join(exporter.metrics_body(encoding))
        text = (one_member(body) if encoding == "gzip" else body).decode()
        return value(parse_exposition(text), "podres_source_errors_total",
                     source="podresources", operation="List")

    assert errors() == 0.0
    first = exporter.metrics_body(encoding)
    assert exporter.metrics_body(encoding) is first
    exporter.state.errors_total[("podresources", "List")] += 1
    assert errors() == 1.0
    exporter.state.up = True
    assert exporter.metrics_body(encoding) is not first


def one_member(body: bytes) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    content = inflater.decompress(body) + inflater.flush()
    assert inflater.eof and inflater.unused_data == b""
    return content


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def state_of(sources: frozenset[str] = frozenset({"podresources", "kubelet"}),
             clock: Clock | None = None) -> PublishedState:
    return PublishedState(lambda: sources, staleness=60.0, clock=clock or Clock())


async def test_ready_and_current_follow_the_last_success_and_staleness() -> None:
    clock = Clock()
    state = state_of(clock=clock)
    assert not state.ready and state.stale and state.current() is None
    ledger = reconcile(assemble(()))
    await state.publish(ledger)
    assert state.current() is None, "published but no poll succeeded yet: stale"
    state.succeeded()
    assert state.ready and state.up and state.current() is not None
    assert state.current().ledger is ledger  # type: ignore[union-attr]
    clock.now += 61
    assert state.ready and state.stale and state.current() is None


async def test_the_plain_body_is_the_exposition_as_rendered_then_the_live_lines() -> None:
    # Sent as two parts, never joined: no second copy of the node's exposition is made
    # at each poll and held between scrapes.
    state = state_of()
    await state.publish(reconcile(assemble(())))
    state.succeeded()
    published = state.current()
    assert published is not None
    exposition, live = state.metrics_body("identity")
    assert exposition is published.exposition
    assert live.startswith(b"# HELP podres_") and b"podres_up 1" in live
    # The compressed body is one member of both, in one part.
    compressed, nothing = state.metrics_body("gzip")
    assert one_member(compressed) == exposition + live and nothing == b""


def test_source_health_counts_what_was_observed_and_says_what_fails_now(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "podres.exporter")
    state = state_of()
    failing = {("kubelet", "pods"): "forbidden"}
    state.account_errors(failing, frozenset(failing))
    assert state.source_up == {"kubelet": False, "podresources": True}
    # The same failure standing (not read again): reported, not counted again, not logged.
    state.account_errors(failing, frozenset())
    assert state.errors_total == {("kubelet", "pods"): 1}
    assert [r.getMessage() for r in caplog.records] == ["source failing"]
    state.account_errors({}, frozenset(), off=("cgroup",))
    assert state.source_up == {"cgroup": False, "kubelet": True, "podresources": True}
    assert [r.getMessage() for r in caplog.records][-1] == "source recovered"
    state.poll_failed()
    assert state.source_up == {} and not state.up
    assert state.errors_total[("exporter", "poll")] == 1


def test_cpu_load_only_when_proc_stat_is_read() -> None:
    state = state_of()
    assert state.cpuload() is None
    state.cpu_busy = {1: 0.123456, 0: 0.5}
    assert state.cpuload() == {"cpus": {"0": 0.5, "1": 0.1235}}


async def test_a_changed_kernel_view_is_a_change_of_the_published_forms() -> None:
    state = state_of()
    ledger = reconcile(assemble(()))
    assert state.changed(ledger, None), "nothing published yet"
    await state.publish(ledger)
    assert not state.changed(ledger, None)
    assert state.changed(ledger, EnforcedCpusets({}))
