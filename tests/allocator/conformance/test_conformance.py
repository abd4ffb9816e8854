"""Every case of the kubelet's CPU manager test tables, run against the model."""

from __future__ import annotations

import pytest

from allocator.conformance.runner import Case, load, run, summary

CASES = list(load())


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case) -> None:
    out = run(case)
    if out.status == "unsupported":
        pytest.skip(f"unsupported: {out.detail}")
    assert out.status == "agree", f"{case.source}@{case.commit[:12]}: {out.detail}"


def test_every_case_is_accounted_for() -> None:
    totals, unsupported = summary()
    assert sum(totals.values()) == len(CASES)
    assert set(totals) <= {"agree", "disagree", "unsupported"}
    assert sum(unsupported.values()) == totals["unsupported"]
    assert all(c.body.get("description") for c in CASES)
