"""The benchmark harness works (figures are not asserted: benchmarks, not timed tests)."""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace

import pytest

from exporter.assemble import assemble, snapshot_from_raw
from exporter.metrics.exposition import node_exposition
from exporter.options import PollOptions
from exporter.sources.convert import allocatable_from_proto, pods_from_proto
from exporter.sources.kubelet_bodies import config_from_object, pod_list_from_object
from foundation.helpers import REPO, check_invariants
from reconciler.kube import compute_qos
from reconciler.reconcile import reconcile

if str(REPO) not in sys.path:  # bench/ is run from the checkout (python -m bench.cycle)
    sys.path.insert(0, str(REPO))

from bench import cycle, history_bench, synth


@pytest.mark.parametrize(("pods", "cpus"), [(1000, 512), (100, 64), (10, 8), (3, 2)])
def test_synthetic_node_shape(pods: int, cpus: int) -> None:
    node = synth.generate(pods, cpus)
    assert len(node.pods) == pods and node.containers == 4 * pods
    assert len(node.topology.cpus) == cpus
    assert sum(node.kinds.values()) == pods
    assert node.state.allocatable is not None
    ledger = reconcile(assemble(pods_from_proto(node.state.list_response),
                                allocatable=allocatable_from_proto(node.state.allocatable),
                                topology=node.topology,
                                pod_specs=pod_list_from_object(node.state.pod_list),
                                config=config_from_object(node.state.configz)))
    check_invariants(ledger, node.topology)
    assert ledger.anomalies == ()  # a well-behaved kubelet
    assert ledger.cpu_pools.reserved == len(node.reserved)
    if pods >= 100:
        assert node.kinds["hybrid"] and node.kinds["legacy"]
        assert ledger.cpu_pools.pod_shared and ledger.cpu_pools.node_exclusive
        assert ledger.cpu_pools.node_shared  # the node keeps a shared pool


def test_synthetic_pods_body_is_kubelet_like() -> None:
    node = synth.generate(100, 64)
    assert node.state.pod_list is not None
    body = node.state.raw().pods
    assert body is not None and 8_000 <= len(body) / 100 <= 16_000  # per pod, as a kubelet
    specs = {(p.namespace, p.name): p for p in pod_list_from_object(node.state.pod_list) or ()}
    for item in node.state.pod_list["items"]:
        meta, spec, status = item["metadata"], item["spec"], item["status"]
        assert meta["labels"] and meta["annotations"] and meta["ownerReferences"]
        assert "managedFields" not in meta  # the kubelet does not serve them
        for c in spec["containers"] + spec.get("initContainers", []):
            assert c["env"] and c["livenessProbe"] and c["volumeMounts"]
        assert {c["type"] for c in status["conditions"]} >= {"Ready", "PodScheduled"}
        assert [s["name"] for s in status["containerStatuses"]] == [
            c["name"] for c in spec["containers"]]
        # The QoS class served is the one the reconcile derives from the spec.
        assert status["qosClass"] == compute_qos(specs[meta["namespace"], meta["name"]])


def test_synthetic_node_is_deterministic() -> None:
    a, b = synth.generate(50, 32, seed=7), synth.generate(50, 32, seed=7)
    assert a.state.list_response == b.state.list_response
    assert synth.generate(50, 32, seed=8).state.list_response != a.state.list_response


def test_cycle_prints_json_last(capsys: pytest.CaptureFixture[str]) -> None:
    assert cycle.main(["--pods", "20", "--cpus", "16", "--rounds", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert {"pods", "cpus", "floor_ms", "steady_ms", "cold_ms", "steady_ratio",
            "cold_ratio", "kernel_ms", "kernel_ratio", "steady_with_kernel_ratio"} <= set(result)
    assert result["steady_with_kernel_ratio"] >= result["steady_ratio"]
    assert result["pods"] == 20 and result["cpus"] == 16
    assert result["steady_unchanged"] is True
    assert result["with_kubelet"]["steady_unchanged"] is True
    kubelet = result["with_kubelet"]
    assert {"kubelet_floor_ms", "steady_kubelet_ratio", "cold_kubelet_ratio"} <= set(kubelet)
    # The kubelet ratios are to the kubelet floor, not to the PodResources one.
    _assert_ratio(kubelet["steady_kubelet_ratio"], kubelet["spread_ms"]["steady"][0],
                  kubelet["spread_ms"]["kubelet_floor"][0])
    # The targets' ratios are minimum over minimum.
    _assert_ratio(result["cold_ratio"], result["spread_ms"]["cold"][0],
                  result["spread_ms"]["floor"][0])
    assert result["pods_bytes"] > 20 * 5000  # kubelet-sized /pods items
    # The cold cycle includes rendering the exposition (per-pod series on), as serve does.
    assert 0 < result["render_ms"] <= result["cold_ms"]
    # The stages measured apart are reported as medians within their own spread.
    for stage in ("assemble", "reconcile", "render"):
        low, high = result["spread_ms"][stage]
        assert 0 < low <= result[f"{stage}_ms"] <= high
    assert result["exposition_bytes"] > 20 * 100 and result["gzip_ms"] > 0
    assert any(line.startswith("cold") for line in lines)
    # The ratios that move with the machine's load are printed beside, for information.
    assert {"cold_ratio_of_medians", "cold_ratio_paired"} <= set(result)
    assert any(line.startswith("cold × floor:") for line in lines)
    # And over the floor whose two calls are asked at once, as the reader asks them: its
    # own samples (three a round, as the target's floor), minimum over minimum.
    _assert_ratio(result["cold_ratio_gathered_floor"], result["spread_ms"]["cold"][0],
                  result["spread_ms"]["gathered_floor"][0])
    low, high = result["spread_ms"]["gathered_floor"]
    assert 0 < low <= result["gathered_floor_ms"] <= high
    assert any(line.startswith("floor, calls gathered") for line in lines)
    # The bound: the reporting pods' own work after the gathered fetch, over the floor.
    low, high = result["spread_ms"]["reporting_alone"]
    assert 0 < low <= result["reporting_alone_ms"] <= high
    _assert_ratio(result["cold_ratio_bound"], low + result["spread_ms"]["gathered_floor"][0],
                  result["spread_ms"]["floor"][0], terms=2)
    assert result["reporting_pods"] == result["kinds"]["hybrid"] + result["kinds"]["legacy"]
    assert any(line.startswith("reporting pods alone") for line in lines)
    # And with the other pods at their least: one more sum of minima, at least the bound.
    low, high = result["spread_ms"]["others_least"]
    assert 0 < low <= result["others_least_ms"] <= high
    _assert_ratio(result["cold_ratio_least"], result["spread_ms"]["reporting_alone"][0] + low
                  + result["spread_ms"]["gathered_floor"][0], result["spread_ms"]["floor"][0],
                  terms=3)
    assert result["cold_ratio_least"] >= result["cold_ratio_bound"]
    assert any(line.startswith("other pods at least") for line in lines)


def _assert_ratio(ratio: float, over: float, under: float, terms: int = 1) -> None:
    """``ratio`` (rounded to 0.01) is ``over / under`` as the run measured them, given that
    the spreads it prints are rounded to 0.001 ms (``terms`` of them summed in ``over``):
    the ratio of the unrounded figures lies within what that rounding allows."""
    half = 0.0005
    low = (over - terms * half) / (under + half)
    high = (over + terms * half) / (under - half)
    assert low - 0.005 <= ratio <= high + 0.005, (ratio, over, under)


def test_reporting_alone_keeps_the_pods_that_report_and_nothing_else() -> None:
    node = synth.generate(60, 32, seed=3)
    raw = cycle.reporting_alone(node, cycle.reporting(node))
    ledger = reconcile(snapshot_from_raw(raw, "n").snapshot)
    # The synthetic node names each pod by its kind: the shared ones report nothing.
    reporting = {(p.namespace, p.name) for p in node.pods if not p.name.startswith("shared-")}
    assert reporting and len(reporting) < len(node.pods)
    assert {(p.namespace, p.name) for p in ledger.pods} == reporting
    # Their figures are the full node's: the pods that report nothing change none of them.
    full = reconcile(snapshot_from_raw(replace(node.state.raw(node.topology), pods=None,
                                               configz=None), "n").snapshot)
    assert [e for e in full.pods if (e.namespace, e.name) in reporting] == list(ledger.pods)
    assert raw.allocatable == node.state.raw().allocatable and raw.topology is node.topology


def test_cold_bound_is_the_reporting_pods_after_the_quickest_fetch() -> None:
    # 4 ms of the reporting pods' work after a 1 ms gathered fetch, over a 1.25 ms floor.
    assert cycle.cold_bound([[5.0, 4.0], [1.5, 1.0]], [2.0, 1.25]) == 4.0
    # With the other pods' 1.5 ms at their least added: a sum of minima.
    assert cycle.cold_bound([[5.0, 4.0], [2.0, 1.5], [1.5, 1.0]], [2.0, 1.25]) == 5.2


def test_other_pods_least_writes_their_series_as_the_exposition_does() -> None:
    node = synth.generate(60, 32, seed=3)
    reporting = cycle.reporting(node)
    least = cycle.others_lines(cycle.others(node, reporting)).splitlines()
    # Every pod but the reporting ones, each container once: the shared pods' four or five.
    shared = [p for p in node.pods if p.name.startswith("shared-")]
    assert len(least) == sum(len(p.containers) for p in shared) > 0
    # The same lines, byte for byte, as the full node's exposition gives those pods.
    full = reconcile(snapshot_from_raw(replace(node.state.raw(node.topology), pods=None,
                                               configz=None), "n").snapshot)
    body = node_exposition(full, pods_max_series=PollOptions().pods_max_series)[0].decode()
    names = {f'pod="{p.name}"' for p in shared}
    theirs = [line for line in body.splitlines()
              if line.startswith("podres_container_cpus{")
              and line.split(",")[1] in names]
    assert sorted(least) == sorted(theirs)


def test_cycle_ratios_of_a_busy_machine() -> None:
    # Rounds 3 to 5 ran while the machine was busy: their floors (a round trip between
    # threads) took up to three times as long, their cycles twice. Median over median the
    # cycle read 14×, paired 7× (the busier, the lower); minimum over minimum it is 7×.
    cold, floors = [7.0, 7.0, 14.0, 14.0, 14.0], [1.0, 1.0, 1.0, 2.0, 3.0]
    assert round(statistics.median(cold) / statistics.median(floors), 2) == 14.0
    assert cycle.paired_ratio(cold, floors) == 7.0
    assert cycle.paired_ratio([7.0, 14.0, 14.0], [1.0, 3.0, 3.0]) == 4.67
    assert cycle.ratio_of_minima(cold, floors) == 7.0
    with pytest.raises(ValueError):
        cycle.paired_ratio(cold, floors[:-1])


def test_history_bench_measures_serves_write_path_and_the_sqlalchemy_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    history_bench.main(["--pods", "10", "--rounds", "1", "--api-rounds", "2",
                        "--summary-writes", "3"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    by_backend = {r["backend"]: r for r in result["backends"]}
    assert list(by_backend) == ["embedded", "sqlite"]
    for r in by_backend.values():
        # Three containers a pod: a full churn closes and opens an interval for each.
        assert r["unchanged_cycle_rows"] == 0 and r["full_churn_rows"] == 2 * 3 * 10
        assert r["summary_rows"] == 30 * 24 * 60
