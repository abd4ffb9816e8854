"""Process settings of the long-running commands (``serve``, ``demo``, ``api``)."""

from __future__ import annotations

import asyncio.sslproto
import ctypes
import ctypes.util
import gc
from typing import Any

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


# asyncio gives every TLS connection a read buffer of SSLProtocol.max_size (256 KiB),
# zero-filled when the connection opens and so resident for as long as it lives. The
# kubelet client keeps up to three alive between polls (/configz, /pods, /metrics): 0.75 MiB
# resident for buffers idle nearly all the time. A TLS record carries at most 16 KiB, so a
# 64 KiB buffer still takes several records a read.
TLS_READ_BUFFER = 64 * 1024


def shrink_tls_read_buffer() -> None:
    """Make asyncio's TLS connections opened from now on read into ``TLS_READ_BUFFER``
    bytes. A class attribute of the standard library, read when a connection is made: if
    a Python no longer has it, nothing is changed."""
    protocol = asyncio.sslproto.SSLProtocol
    if isinstance(getattr(protocol, "max_size", None), int):
        protocol.max_size = min(protocol.max_size, TLS_READ_BUFFER)


# glibc keeps the memory a large recompute freed (a node's worth of entries, the rendered
# bodies it replaced) in its arenas, one per thread that allocated; malloc_trim hands the
# free pages back to the system. Other C libraries have no such call: then nothing is done.
_MALLOC_TRIM: Any
try:
    _MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    _MALLOC_TRIM.argtypes = (ctypes.c_size_t,)
    _MALLOC_TRIM.restype = ctypes.c_int
except (OSError, AttributeError):
    _MALLOC_TRIM = None


def release_free_memory() -> bool:
    """Return the C allocator's free pages to the system (after a changed node was
    recomputed); whether the platform could."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
