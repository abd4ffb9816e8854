"""The windows and steps of the history's queries: what the API validates before it
touches (or loads) the database."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from exporter.history.fleetplan import SERIES_STEPS

MAX_POINTS = 20000


@dataclass(frozen=True, slots=True)
class Window:
    """``at`` (a point in time) or ``start``/``end`` (an overlap window), or nothing."""

    at: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None


def auto_step(start: datetime, end: datetime, points: int = 500) -> int:
    """The smallest round step giving at most about ``points`` points (at least 60 s)."""
    span = max((end - start).total_seconds(), 1.0)
    wanted = span / points
    for step in SERIES_STEPS:
        if step >= wanted:
            return step
    return math.ceil(wanted / 86400) * 86400


def check_points(start: datetime, end: datetime, step: int) -> None:
    if (end - start).total_seconds() / step > MAX_POINTS:
        raise ValueError(f"too many points: (to - from) / step exceeds {MAX_POINTS}; "
                         "use a larger step")


def default_window(start: datetime | None, end: datetime | None,
                   now: datetime) -> tuple[datetime, datetime]:
    end = end or now
    start = start or end - timedelta(days=1)
    return start, end
