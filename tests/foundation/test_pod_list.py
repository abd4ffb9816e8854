"""The kubelet's /pods reduced to the fields the exporter reads: the pod specs and cgroup
references read from it equal those of the whole body on a kubelet-sized node, absent and
null fields keep their meaning, and a body it cannot reduce is left to the parsers."""

from __future__ import annotations

import json
import sys
import tracemalloc

import pytest

from bench.synth import generate
from exporter.sim.cgroupfs import decorate_pod_list
from exporter.sources import pod_list as pod_list_module
from exporter.sources.cgroup import pod_refs_from_body, pod_refs_from_pod_list
from exporter.sources.kubelet_bodies import parse_json_object, pod_specs_from_body
from exporter.sources.pod_list import reduce_pod_list
from reconciler.kube import SpecError, pod_list_from_json


def test_a_kubelet_sized_body_reads_the_same_and_shrinks() -> None:
    node = generate(200, 128)
    assert node.state.pod_list is not None
    body = json.dumps(decorate_pod_list(node.state.pod_list)).encode()
    reduced = reduce_pod_list(body)
    whole, small = json.loads(body), json.loads(reduced)
    assert pod_list_from_json(small) == pod_list_from_json(whole)
    refs = pod_refs_from_pod_list(small)
    assert refs == pod_refs_from_pod_list(whole) and len(refs) == 200
    # Labels, annotations, env, probes, mounts and conditions are gone.
    assert len(reduced) * 5 < len(body)
    for dropped in (b"annotations", b"ownerReferences", b"env", b"livenessProbe",
                    b"volumeMounts", b"conditions"):
        assert dropped in body and dropped not in reduced


def test_the_reduced_body_holds_no_more_memory_than_its_bytes() -> None:
    """The reduced body is kept until /pods changes: its allocation, traced, is its own
    size (the encoder's working buffer for this node's body is a third larger)."""
    node = generate(1000, 512)
    assert node.state.pod_list is not None
    body = json.dumps(decorate_pod_list(node.state.pod_list)).encode()
    reduce_pod_list(body)  # any first-use allocation out of the way
    tracemalloc.start()
    try:
        reduced = reduce_pod_list(body)
        kept = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, pod_list_module.__file__)])
    finally:
        tracemalloc.stop()
    largest = max(trace.size for trace in kept.traces)
    assert len(reduced) > 1_000_000
    assert largest <= sys.getsizeof(reduced), (largest, len(reduced))


def test_absent_and_null_fields_keep_their_meaning() -> None:
    body = json.dumps({"items": [
        {"metadata": {"name": "a", "uid": "u1"}, "spec": {"containers": None},
         "status": None},
        {"metadata": {"name": "b", "namespace": None}, "spec": {
            "containers": [{"name": "c", "resources": None, "restartPolicy": "Always"}],
            "initContainers": [{"name": "i", "restartPolicy": "Always",
                                "resources": {"requests": {"cpu": "1"}}}]},
         "status": {"qosClass": "Burstable", "containerStatuses": None}},
    ]}).encode()
    reduced = json.loads(reduce_pod_list(body))
    assert reduced == {"items": [
        {"metadata": {"name": "a", "uid": "u1"}, "spec": {"containers": None},
         "status": None},
        {"metadata": {"name": "b", "namespace": None}, "spec": {
            "containers": [{"name": "c", "resources": None, "restartPolicy": "Always"}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1"}},
                                "restartPolicy": "Always"}]},
         "status": {"qosClass": "Burstable", "containerStatuses": None}},
    ]}
    assert pod_list_from_json(reduced) == pod_list_from_json(json.loads(body))


def test_the_real_kubelets_empty_list_is_no_pod() -> None:
    """The real kubelet (1.36 and 1.37, tests/realnode) answers /pods on a node without
    pods with ``items: null``: no pod, not a broken answer."""
    body = b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":null}\n'
    assert pod_list_from_json(json.loads(body)) == ()
    assert pod_specs_from_body(body) == ()
    assert pod_refs_from_body(body) == ()


@pytest.mark.parametrize("body", [
    b"{broken",
    b"[]",
    b'{"items": 5}',
    b'{"items": [{"metadata": 7}]}',
    b'{"items": [{"spec": {"containers": "all"}}]}',
    b'{"items": [{"status": {"containerStatuses": {"name": "x"}}}]}',
    b'{"items": [{"metadata": {"name": "\\ud800"}}]}',
    b"[" * 10_000 + b"]" * 10_000,
])
def test_a_body_it_cannot_reduce_is_left_whole(body: bytes) -> None:
    """The parsers, not the reduction, say what is wrong with it."""
    assert reduce_pod_list(body) is body


def test_a_wrong_value_in_a_kept_field_is_still_the_parsers_error() -> None:
    body = b'{"items": [{"metadata": {"name": "a"}, "spec": {"containers": [{"name": 5}]}}]}'
    reduced = reduce_pod_list(body)
    assert reduced is not body
    with pytest.raises(SpecError, match="without a name"):
        pod_list_from_json(parse_json_object(reduced))
