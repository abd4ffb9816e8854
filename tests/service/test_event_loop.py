"""Work that grows with the node runs on the event loop only up to a bound (the reconcile
of a node under the reader's INLINE_BYTES: a few milliseconds, less than a thread hand-off
costs); past it, while a changed node is reconciled, or its new ledger rendered (always in
a worker thread), scrapes are answered from the previous exposition. The scenario here is
small, so the bound is set to nothing to put it past it.

The slow step is injected (it waits on an event the test sets only after a scrape was
answered), so nothing here depends on how fast the machine is: with the work on the loop,
the scrape could not be answered until the step gave up waiting, and the step records that.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import StartSim
from tests.service.conftest import RunServe, scenario_root, series, value, without_pods

SCENARIO = "database-pod-scope"
GONE = ("batch", "worker")


def has_gone_pod(samples: Any) -> bool:
    return bool(series(samples, "podres_container_cpus", namespace=GONE[0], pod=GONE[1])
                or series(samples, "podres_pod_cpus", namespace=GONE[0], pod=GONE[1]))


@pytest.mark.parametrize("module, name", [("exporter.ledger_cache", "reconcile"),
                                          ("exporter.published", "node_exposition")])
async def test_scrape_is_answered_while_a_changed_node_is_processed(
        start_sim: StartSim, run_serve: RunServe, monkeypatch: pytest.MonkeyPatch,
        module: str, name: str) -> None:
    monkeypatch.setattr("exporter.ledger_cache.INLINE_BYTES", 0)
    directory = scenario_root() / SCENARIO
    sim = await start_sim(directory, http=True)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "200ms")
    await served.wait_for(lambda s: value(s, "podres_up") == 1.0 and has_gone_pod(s),
                          what="first ledger")

    entered, release = threading.Event(), threading.Event()
    released_in_time: list[bool] = []
    real: Callable[..., Any] = getattr(__import__(module, fromlist=[name]), name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        released_in_time.append(release.wait(timeout=10))
        return real(*args, **kwargs)

    monkeypatch.setattr(f"{module}.{name}", slow)
    sim.set_state(without_pods(sim.state, GONE))
    assert await asyncio.to_thread(entered.wait, 30), "the changed node was never processed"

    during = await served.metrics()
    release.set()
    # Answered from the previous ledger while the new one was being made.
    assert has_gone_pod(during)
    await served.wait_for(lambda s: not has_gone_pod(s), what="the new ledger")
    assert released_in_time and all(released_in_time), \
        "the scrape waited for the slow step: it ran on the event loop"
