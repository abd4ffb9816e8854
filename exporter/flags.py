"""Command-line flags in the exporter convention: ``--dotted.names`` that each also read a
``PODRES_DOTTED_NAMES`` environment variable, duration values written ``15s``/``1m``, and the
value types (bounded durations, positive counts) every command shares."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from typing import Any

_TERM = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_EXAMPLES = "examples: 500ms, 15s, 1m, 2h, 30d"


def env_name(flag: str) -> str:
    return "PODRES_" + re.sub(r"[^A-Za-z0-9]+", "_", flag.lstrip("-")).upper()


def parse_duration(text: str) -> float:
    """``"15s"`` → 15.0 seconds; also ``500ms``, ``1m``, ``2h``, ``30d``, ``1h30m``.
    Durations are never negative: a leading ``-`` is refused by name."""
    text = text.strip()
    if text.startswith("-"):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must not be negative")
    total = 0.0
    pos = 0
    for match in _TERM.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} ({_EXAMPLES})")
    return total


def format_duration(seconds: float) -> str:
    """The shortest exact spelling ``parse_duration`` reads back: 0.1 → ``100ms``."""
    for unit in ("d", "h", "m", "s"):
        count = seconds / _UNITS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{round(seconds * 1000)}ms"


def duration(minimum: float, maximum: float) -> Callable[[str], float]:
    """An argparse ``type`` for a duration within ``[minimum, maximum]`` seconds, with the
    same error wording as ``parse_duration``."""
    def parse(text: str) -> float:
        value = parse_duration(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text.strip()!r}: must be at least "
                f"{format_duration(minimum)}")
        if value > maximum:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text.strip()!r}: must be at most "
                f"{format_duration(maximum)}")
        return value
    return parse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def add_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: str,
             *aliases: str, **kwargs: Any) -> argparse.Action:
    """``parser.add_argument`` with the environment variable as the default and named in
    the help text."""
    var = env_name(flag)
    if var in os.environ:
        raw = os.environ[var]
        action = kwargs.get("action")
        if action in ("store_true", argparse.BooleanOptionalAction):
            kwargs["default"] = raw.strip().lower() in ("1", "true", "yes", "on")
        elif action == "append" or kwargs.get("nargs") in ("+", "*"):
            kwargs["default"] = [item for item in raw.split(",") if item]
        else:
            kwargs["default"] = raw
            # argparse applies `type` to string defaults, so a bad value still gets a
            # clear error rather than a traceback.
    help_text = kwargs.get("help", "")
    if help_text != argparse.SUPPRESS:
        kwargs["help"] = f"{help_text} [env {var}]".strip()
    return parser.add_argument(flag, *aliases, **kwargs)
