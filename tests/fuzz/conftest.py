"""Reports how many examples each fuzz target ran, on the terminal and, when
``PODRES_FUZZ_SUMMARY`` names a file, as one line appended to it."""

from __future__ import annotations

import os
from typing import Any

from fuzz.budget import COUNTS, summary


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not COUNTS:
        return
    line = summary()
    terminalreporter.write_line(line)
    target = os.environ.get("PODRES_FUZZ_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(line + "\n")
