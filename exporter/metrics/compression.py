"""Content-coding of the exporter's bodies: negotiation and gzip that costs little per
request.

Prometheus always asks for gzip. The bodies are derived from the ledger, so each is
compressed at most once per ledger change; the ``/metrics`` body also ends in a few live
self-metric lines, which ``GzipPrefix`` appends for the cost of those lines alone while still
producing one ordinary gzip member (clients that stop after the first member of a
multi-member stream, curl's ``--compressed`` among them, get the whole body).
"""

from __future__ import annotations

import functools
import gzip
import struct
import zlib
from typing import Literal

Encoding = Literal["gzip", "identity"]

# client_golang's promhttp compresses at BestSpeed too: level 1 is ~7x faster than the
# default level 6 here for a 30% larger body (30 KB instead of 23 KB for 1000 pods).
LEVEL = 1


@functools.lru_cache(maxsize=64)
def choose_encoding(accept_encoding: str | None) -> Encoding:
    """``gzip`` when the ``Accept-Encoding`` header accepts it with a q-value above 0 and
    not below the one it gives ``identity``; else ``identity`` (also when the header
    refuses identity too: an uncompressed answer beats a 406 for a scraper). Like
    client_python's ``choose_encoder`` and ``gzip_accepted``, with q-values honoured."""
    q: dict[str, float] = {}
    for item in (accept_encoding or "").split(","):
        coding, *params = (part.strip() for part in item.split(";"))
        weight = _weight(params)
        if coding and 0.0 <= weight <= 1.0:
            name = coding.lower()
            name = "gzip" if name == "x-gzip" else name
            q[name] = max(weight, q.get(name, 0.0))
    star = q.get("*", 0.0)
    gzip_q = q.get("gzip", star)
    return "gzip" if gzip_q > 0 and gzip_q >= q.get("identity", star) else "identity"


def _weight(params: list[str]) -> float:
    """The q-value among a coding's parameters: 1 when absent, -1 when malformed (the
    coding is then ignored)."""
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                return float(value.strip())
            except ValueError:
                return -1.0
    return 1.0


def gzip_bytes(data: bytes) -> bytes:
    """One gzip member of ``data`` (fixed header: equal inputs give equal bytes)."""
    return gzip.compress(data, LEVEL, mtime=0)


class GzipPrefix:
    """``data`` compressed once, ready to be completed by a tail: ``finish(tail)`` is one
    gzip member of ``data + tail`` and costs only the tail.

    A deflate stream is a run of blocks, the last one marked final, and a block may refer
    back only to data before it. The head is ``data``'s blocks ended by a sync flush (on a
    byte boundary, none of them final); each tail is a deflate stream of its own that
    follows them (its blocks refer to the tail alone, the last is final); the trailer's
    CRC-32 is the head's continued over the tail. Only bytes are kept between requests,
    not a compressor to continue: its state is ~256 KiB, held for the life of a ledger and
    copied once more at every finish."""

    __slots__ = ("_crc", "_head", "_size")

    def __init__(self, data: bytes) -> None:
        compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        self._head = b"".join((_GZIP_HEADER, compressor.compress(data),
                               compressor.flush(zlib.Z_SYNC_FLUSH)))
        self._crc = zlib.crc32(data)
        self._size = len(data)

    def finish(self, tail: bytes) -> bytes:
        compressor = zlib.compressobj(LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS,
                                      _TAIL_MEM_LEVEL)
        trailer = struct.pack("<II", zlib.crc32(tail, self._crc),
                              (self._size + len(tail)) & 0xFFFFFFFF)
        return b"".join((self._head, compressor.compress(tail), compressor.flush(), trailer))


# A gzip member's header as gzip_bytes writes it (RFC 1952): magic, deflate, no flags, no
# modification time (equal inputs give equal bytes), the fastest level's extra flag, Unix.
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x04\x03"
# The tail is the self-metrics' few lines: a smaller hash table does as well on them, and
# the compressor made for each finish allocates 130 KiB instead of 256.
_TAIL_MEM_LEVEL = 1
