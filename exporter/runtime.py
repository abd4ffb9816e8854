"""Process settings of the long-running commands (``serve``, ``demo``, ``api``)."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ctypes
import ctypes.util
import gc
from collections.abc import Callable
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
_MALLOPT: Any
try:
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _MALLOC_TRIM = _LIBC.malloc_trim
    _MALLOC_TRIM.argtypes = (ctypes.c_size_t,)
    _MALLOC_TRIM.restype = ctypes.c_int
    _MALLOPT = _LIBC.mallopt
    _MALLOPT.argtypes = (ctypes.c_int, ctypes.c_int)
    _MALLOPT.restype = ctypes.c_int
except (OSError, AttributeError):
    _MALLOC_TRIM = _MALLOPT = None

# glibc serves a block of at least M_MMAP_THRESHOLD bytes (128 KiB at start) by a mapping
# of its own, unmapped when freed; but when such a block is freed it raises the threshold
# to that block's size (up to 32 MiB), so that after serve's first /pods read (a 12 MB
# buffer on a 1000-pod node) every block under 12 MB comes from the heap or a thread's
# arena instead, where a freed one leaves a hole that is rarely handed back: the /pods
# body read back for a recompute (1.2 MB), the rendered bodies. Setting the threshold
# turns that raise off (mallopt's contract). It is set at 2 MiB, not glibc's starting 128
# KiB: at 128 KiB every scrape's half-megabyte body, its copies and the transport's unsent
# rest each took a fresh mapping, faulted in page by page, which put the plain /metrics
# p99 at 1.3-1.8x its static twin (1.0-1.2x at 2 MiB), and the resident set was no lower
# (docs/performance.md, "Issue 33, fourth pass"). The /pods buffers, over 2 MiB on a busy
# node, still get mappings of their own.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 2 * 1024 * 1024


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at ``MMAP_THRESHOLD`` (see above); whether the platform
    could. Call once, before the first large read. Elsewhere (musl, macOS) nothing is
    done: their allocators have no such threshold to move."""
    if _MALLOPT is None:
        return False
    return bool(_MALLOPT(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def release_free_memory() -> bool:
    """Return the C allocator's free pages to the system (after a changed node was
    recomputed); whether the platform could."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


# A scrape's half-megabyte answer leaves what it copied (the part of the body the transport
# could not send at once, the compressor that completes a gzip body) freed in glibc's
# heap, which glibc hands back only from its top: after a burst of scrapes some 1 MiB
# stayed resident until the next recompute (docs/performance.md, "Scrapes leave nothing
# behind"). Once the answers have stopped for this long, the free pages go back; answers
# closer together push it on, so a burst costs one release, not one an answer.
RELEASE_IDLE_SECONDS = 0.5


class IdleRelease:
    """``release`` (``release_free_memory``) once no node-sized answer has started for
    ``delay`` seconds: ``note()`` at each one, from the event loop."""

    def __init__(self, delay: float = RELEASE_IDLE_SECONDS,
                 release: Callable[[], object] = release_free_memory) -> None:
        self.delay = delay
        self.release = release
        self._timer: asyncio.TimerHandle | None = None

    def note(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(self.delay, self.release)
