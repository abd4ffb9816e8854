"""The ledger computed again only when the raw inputs changed (exporter.ledger_cache): the
content-hash shortcut when nothing changed, a full recompute when anything did, on the loop
or in a thread by size, and a problem in the inputs reported on every poll that reads it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from exporter import ledger_cache
from exporter.assemble import snapshot_from_raw
from exporter.sources.fixture import KubeletState, load_fixture_dir
from foundation.reading import DB, HYBRID, hostile
from reconciler.reconcile import reconcile


async def test_unchanged_node_is_not_recomputed(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB, http=True)
    reader = reader_for(sim)
    first = await reader.read()
    assert first.changed and first.errors == {}
    second = await reader.read()
    assert not second.changed
    assert second.ledger is first.ledger
    assert second.raw == first.raw


@pytest.mark.parametrize("limit", [1 << 30, 0], ids=["small", "over the limit"])
async def test_a_small_node_is_reconciled_on_the_loop_a_large_one_off_it(
        start_sim: Any, reader_for: Any, monkeypatch: pytest.MonkeyPatch, limit: int,
) -> None:
    """Under INLINE_BYTES of answers the recompute runs on the event loop's thread (a
    thread hand-off would cost more); over it, in a worker thread, so that scrapes are
    answered meanwhile. Same ledger either way."""
    monkeypatch.setattr(ledger_cache, "INLINE_BYTES", limit)
    sim = await start_sim(DB, http=True)
    reader = reader_for(sim)
    threads: list[int] = []
    compute = reader.ledgers.compute

    def recorded(raw: Any) -> Any:
        threads.append(threading.get_ident())
        return compute(raw)

    monkeypatch.setattr(reader.ledgers, "compute", recorded)
    reading = await reader.read()
    assert reading.changed and reading.errors == {}
    on_loop = threads == [threading.get_ident()]
    assert len(threads) == 1 and on_loop == (limit > 0)
    assert reading.ledger == reconcile(snapshot_from_raw(reading.raw, "").snapshot)


async def test_any_change_means_a_full_recompute(start_sim: Any, reader_for: Any) -> None:
    sim = await start_sim(DB, http=True)
    reader = reader_for(sim)
    before = (await reader.read()).ledger
    base = load_fixture_dir(DB).kubelet
    # PodResources change.
    sim.set_state(load_fixture_dir(HYBRID).kubelet)
    changed = await reader.read()
    assert changed.changed and [p.name for p in changed.ledger.pods] == ["web"]
    # Back to the original: equal to the first ledger, computed afresh.
    sim.set_state(base)
    again = await reader.read()
    assert again.changed and again.ledger == before
    # Only the pod specs change: recomputed too, once /pods is read again (PodResources
    # says nothing changed, so that is when its refresh is due).
    pods = dict(base.pod_list or {})
    pods["items"] = []
    sim.set_state(KubeletState(base.list_response, base.allocatable, pods, base.configz))
    spec_change = await reader.read(time.monotonic() + reader.options.pods_interval)
    assert spec_change.changed
    # The kubelet lists no pods any more: no spec is known for any of them.
    assert {p.estimate_basis for p in spec_change.ledger.pods} == {"podresources"}
    assert {p.budget_cpus for p in spec_change.ledger.pods} == {None}


async def test_a_persistent_parse_error_stays_an_error(start_sim: Any, reader_for: Any
                                                       ) -> None:
    """Unchanged bytes skip the work, not the verdict."""
    sim = await start_sim(hostile("pods", b'{"items": [{"metadata": 7}]}'), http=True)
    reader = reader_for(sim)
    first = await reader.poll()
    second = await reader.poll()
    assert second.reading is not None and not second.reading.changed
    assert set(second.errors) == set(first.errors) == {("kubelet", "pods")}
    assert second.observed == {("kubelet", "pods")}  # counted on every poll that reads it


async def test_the_placement_state_is_made_only_when_asked_for(
        start_sim: Any, reader_for: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed ledger is published without its placement state (history's, for plan
    --fleet): it is made on the first request, once per ledger, equal to what the snapshot
    gives."""
    made: list[int] = []
    real = ledger_cache.node_state

    def counted(*args: Any) -> Any:
        made.append(1)
        return real(*args)

    monkeypatch.setattr(ledger_cache, "node_state", counted)
    sim = await start_sim(DB, http=True)
    reading = await reader_for(sim).read()
    assert made == []
    expected = real(snapshot_from_raw(reading.raw, "").snapshot, reading.ledger)
    assert expected is not None
    assert reading.placement == expected and reading.placement == expected
    assert made == [1]
