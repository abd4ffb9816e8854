"""The fuzzing budget and the count of examples each target ran.

``make test`` runs a small, derandomized budget (the same examples on every run, a few
seconds in all); ``make fuzz`` sets ``PODRES_FUZZ_EXAMPLES`` and runs that many random
examples per target. ``COUNTS`` is reported at the end of the session (conftest.py)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

QUICK_EXAMPLES = 30
LONG_EXAMPLES = int(os.environ.get("PODRES_FUZZ_EXAMPLES", "0") or 0)

settings.register_profile(
    "podres-fuzz-quick", max_examples=QUICK_EXAMPLES, derandomize=True, database=None,
    deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])
settings.register_profile(
    "podres-fuzz-long", max_examples=max(LONG_EXAMPLES, 1), derandomize=False, database=None,
    deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])
PROFILE = "podres-fuzz-long" if LONG_EXAMPLES else "podres-fuzz-quick"

COUNTS: Counter[str] = Counter()

F = TypeVar("F", bound=Callable[..., Any])


def fuzz(scale: float = 1.0) -> Callable[[F], F]:
    """Hypothesis settings of the active profile; ``scale`` shrinks the
    budget of a target whose examples are expensive (a poll over gRPC and HTTPS)."""
    base = settings.get_profile(PROFILE)
    examples = max(1, int(base.max_examples * scale))

    def apply(fn: F) -> F:
        return settings(base, max_examples=examples)(fn)  # type: ignore[no-any-return]
    return apply


def timeout(seconds: float) -> int:
    """A per-test timeout (pytest-timeout) for ``seconds`` at the quick budget, stretched in
    proportion for a long run: it catches a hang, not a slow example."""
    return int(seconds * max(1.0, LONG_EXAMPLES / 250))


def ran(target: str) -> None:
    """Count one example of ``target`` (called first thing in each example)."""
    COUNTS[target] += 1


def summary() -> str:
    parts = ", ".join(f"{name}={count}" for name, count in sorted(COUNTS.items()))
    return f"fuzz examples per target ({PROFILE}): {parts or 'none ran'}"
