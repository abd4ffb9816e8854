"""The kubelet reference for the tests: built on first use (docs/design.md#reference). Without
Go every test here skips with one line; with PODRES_REQUIRE_REFERENCE=1 (CI) that is a
failure instead."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from bench.reference import ReferenceUnavailable, build

_built: dict[str, str] = {}


def _require(version: str) -> None:
    if version in _built:
        reason = _built[version]
    else:
        try:
            build(version)
            reason = ""
        except ReferenceUnavailable as exc:
            reason = str(exc).splitlines()[0]
        _built[version] = reason
    if not reason:
        return
    if os.environ.get("PODRES_REQUIRE_REFERENCE") == "1":
        pytest.fail(f"kubelet {version} reference required (PODRES_REQUIRE_REFERENCE=1): "
                    f"{reason}", pytrace=False)
    pytest.skip(f"kubelet {version} reference unavailable: {reason}")


@pytest.fixture
def need_reference() -> Callable[[str], None]:
    """``need_reference("1.37")`` builds that reference if needed, or skips (fails in CI)."""
    return _require
