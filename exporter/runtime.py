"""Process settings of the long-running commands (``serve``, ``demo``, ``api``)."""

from __future__ import annotations

import gc

# A poll of a busy node builds tens of thousands of short-lived objects (an entry per
# container, pod and CPU). With CPython's default young-generation threshold of 700 that is
# dozens of collections per poll, a noticeable share of a cold cycle; the ledger they build
# lives until the next change anyway, so collecting early buys nothing.
YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Collect young objects less often, and move everything built at start-up (modules,
    channels, the web app) out of the collector's sight: full collections then scan only
    what the polls create. Call once, after start-up."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
