"""Command-line flags in the exporter convention: ``--dotted.names`` that each also read a
``PODRES_DOTTED_NAMES`` environment variable, and duration values written ``15s``/``1m``."""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def env_name(flag: str) -> str:
    return "PODRES_" + re.sub(r"[^A-Za-z0-9]+", "_", flag.lstrip("-")).upper()


def parse_duration(text: str) -> float:
    """``"15s"`` → 15.0 seconds; also ``500ms``, ``1m``, ``2h``, ``30d``, ``1h30m``."""
    text = text.strip()
    total = 0.0
    pos = 0
    for match in re.finditer(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r} (examples: 500ms, 15s, 1m, 2h, 30d)")
    return total


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
