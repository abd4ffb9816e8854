"""Records ``cases.json``: random topology-manager merges answered by the kubelet's own
``Policy.Merge`` (k8s.io/kubernetes v1.37.2, ``pkg/kubelet/cm/topologymanager``).

    mkdir /tmp/mergecheck && cp tests/allocator/merge_cases/main.go /tmp/mergecheck/
    sed 's#^module .*#module mergecheck#' reference/kubelet/go.mod > /tmp/mergecheck/go.mod
    cp reference/kubelet/go.sum /tmp/mergecheck/
    (cd /tmp/mergecheck && go build -o mergecheck .)
    python tests/allocator/merge_cases/record.py /tmp/mergecheck/mergecheck
"""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

POLICIES = ("best-effort", "restricted", "single-numa-node")


def random_cases(seed: int, count: int) -> list[dict[str, object]]:
    rnd = random.Random(seed)
    cases: list[dict[str, object]] = []
    for _ in range(count):
        nodes = list(range(rnd.choice([1, 2, 2, 3, 4])))
        masks = [list(c) for k in range(1, len(nodes) + 1)
                 for c in itertools.combinations(nodes, k)]
        providers: list[object] = []
        for _ in range(rnd.randint(1, 3)):
            r = rnd.random()
            if r < 0.1:
                providers.append(None)  # no preference
            elif r < 0.2:
                providers.append([])  # no possible affinity
            else:
                chosen = sorted(rnd.sample(masks, rnd.randint(1, len(masks))),
                                key=lambda m: (len(m), m))
                providers.append([{"mask": m, "preferred": rnd.random() < 0.5}
                                  for m in chosen])
        cases.append({"policy": rnd.choice(POLICIES), "nodes": nodes, "providers": providers})
    return cases


def main() -> None:
    cases = random_cases(2026, 600)
    out = subprocess.run([sys.argv[1]], input=json.dumps(cases), text=True,
                         capture_output=True, check=True).stdout
    for case, result in zip(cases, json.loads(out), strict=True):
        case["kubelet"] = result
    doc = {"source": "k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/topologymanager Policy.Merge "
                     "(best-effort, restricted, single-numa-node; no policy options)",
           "cases": cases}
    Path(__file__).with_name("cases.json").write_text(json.dumps(doc, separators=(",", ":")))


if __name__ == "__main__":
    main()
