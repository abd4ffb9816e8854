"""Bounded reads of small kernel files (cgroupfs, procfs) through a host mount.

A host mount is not trusted to hold only what the kernel puts there: every read opens
without following a final symlink and without blocking (a FIFO would otherwise hang the
poll), insists on a regular file and stops at a size bound. procfs and cgroupfs report a
size of 0 for their files, so the bound is enforced while reading, not from ``stat``.
"""

from __future__ import annotations

import os
import stat

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class KernelFileError(OSError):
    """A path that is there but is not a readable regular file of bounded size."""


def read_kernel_file(path: str, max_bytes: int, *, truncate: bool = False) -> bytes:
    """The bytes of ``path``, at most ``max_bytes``. A longer file is an error, unless
    ``truncate``: then the first ``max_bytes`` are returned (for files whose useful part
    comes first, such as ``/proc/stat``). Raises ``OSError`` (``FileNotFoundError`` when the
    path is gone)."""
    fd = os.open(path, _FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise KernelFileError(f"{path}: not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            want = max_bytes + 1 - size
            chunk = os.read(fd, want)
            chunks.append(chunk)
            size += len(chunk)
            # A short read is the end: regular files, and the seq_file-backed files of
            # procfs and cgroupfs, hand over everything there is in one read. It saves the
            # second, empty read per file (thousands per poll).
            if len(chunk) < want:
                break
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        if not truncate:
            raise KernelFileError(f"{path}: larger than {max_bytes} bytes")
        data = data[:max_bytes]
    return data
