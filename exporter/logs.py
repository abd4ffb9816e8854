"""Structured logs: ``logfmt`` (default) or ``json``, one line per event, with the
``extra={...}`` fields of the call as keys."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    fields: dict[str, object] = {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_"):
            fields[key] = value
    if record.exc_info and record.exc_info[1] is not None:
        fields["exc"] = repr(record.exc_info[1])
    return fields


def _logfmt_value(value: object) -> str:
    text = str(value)
    if text and all(c.isalnum() or c in "-._:/@+" for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record).items())


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str, ensure_ascii=False)


def setup_logging(level: str = "info", fmt: str = "logfmt") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Library chatter (aiohttp access logs, asyncio debug) stays out of the operator's way.
    for noisy in ("aiohttp.access", "alembic"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
