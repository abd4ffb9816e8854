"""Runs the kubelet's CPU manager test tables (``data/*.json``) against the allocator model.

Every case either runs (and agrees or not) or is reported unsupported with the feature it
needs; none is dropped. ``python -m allocator.conformance.runner`` (with ``tests`` on the
path) prints the counts.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allocator.conformance import kinds

DATA = Path(__file__).parent / "data"


@dataclass(frozen=True)
class Case:
    file: str
    go_test: str
    source: str
    commit: str
    kind: str
    index: int
    body: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.go_test}[{self.index}] {self.body['description']}"


@dataclass(frozen=True)
class Outcome:
    status: str  # "agree" | "disagree" | "unsupported"
    detail: str = ""


def load() -> Iterator[Case]:
    for path in sorted(DATA.glob("*.json")):
        doc = json.loads(path.read_text())
        for i, body in enumerate(doc["cases"]):
            yield Case(path.name, doc["go_test"], doc["source"], doc["commit"],
                       body.get("kind", doc["kind"]), i, body)


def run(case: Case) -> Outcome:
    handler: Callable[[dict[str, Any]], tuple[str, str]] | None = kinds.HANDLERS.get(case.kind)
    if handler is None:
        return Outcome("unsupported", kinds.UNSUPPORTED_KINDS[case.kind])
    need = kinds.missing_feature(case.body)
    if need:
        return Outcome("unsupported", need)
    status, detail = handler(case.body)
    return Outcome(status, detail)


def summary() -> tuple[Counter[str], Counter[str]]:
    totals: Counter[str] = Counter()
    unsupported: Counter[str] = Counter()
    for case in load():
        out = run(case)
        totals[out.status] += 1
        if out.status == "unsupported":
            unsupported[out.detail] += 1
    return totals, unsupported


if __name__ == "__main__":
    totals, unsupported = summary()
    ran = totals["agree"] + totals["disagree"]
    print(f"cases {sum(totals.values())}: run {ran}, agree {totals['agree']}, "
          f"disagree {totals['disagree']}, unsupported {totals['unsupported']}")
    for feature, n in sorted(unsupported.items()):
        print(f"  unsupported ({n}): {feature}")
