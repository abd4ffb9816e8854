"""Times at the history's edges: RFC 3339 or unix seconds in, aware UTC datetimes inside."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

# ASCII digits only: Python's ``\d`` and ``float`` also take other scripts' digits.
_NUMBER = re.compile(r"^[+-]?[0-9]+(\.[0-9]+)?$")
# Earliest and latest instants accepted (what every backend can store).
MIN_TIME = datetime(1970, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(9999, 1, 1, tzinfo=UTC)


class TimeError(ValueError):
    """A time that is neither RFC 3339 nor unix seconds."""


def utc(value: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def now() -> datetime:
    return datetime.now(UTC)


def parse_time(text: str) -> datetime:
    """``2026-11-30T09:15:00Z``, ``2026-11-30T10:15:00+01:00``, ``1795338900`` (unix
    seconds, fractions allowed) or ``now``; a time without an offset is UTC."""
    raw = text.strip()
    if not raw:
        raise TimeError("empty time (expected RFC 3339 like 2026-11-30T09:15:00Z or unix seconds)")
    if raw.lower() == "now":
        return now()
    if _NUMBER.match(raw):
        seconds = float(raw)
        if not math.isfinite(seconds) or not 0 <= seconds < MAX_TIME.timestamp():
            raise TimeError(f"unix time out of range: {text!r}")
        return datetime.fromtimestamp(seconds, UTC)
    try:
        value = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise TimeError(
            f"invalid time {text!r} (expected RFC 3339 like 2026-11-30T09:15:00Z "
            "or unix seconds)") from None
    try:
        value = utc(value)
    except OverflowError:  # 0001-01-01T00:00:00+00:01 is before year 1 in UTC
        raise TimeError(f"time out of range: {text!r}") from None
    if not MIN_TIME <= value < MAX_TIME:
        raise TimeError(f"time out of range: {text!r}")
    return value


def ago(seconds: float) -> datetime:
    """The instant ``seconds`` before now, refused when it lies before the history's
    earliest time (a duration of a million days, say)."""
    try:
        value = now() - timedelta(seconds=seconds)
    except OverflowError:
        value = MIN_TIME - timedelta(days=1)
    if value < MIN_TIME:
        raise TimeError(f"{seconds:g} seconds ago is before {format_time(MIN_TIME)}")
    return value


def format_time(value: datetime | None) -> str | None:
    """RFC 3339 with ``Z`` and microseconds only when present."""
    if value is None:
        return None
    text = utc(value).isoformat()
    return text.replace("+00:00", "Z")
