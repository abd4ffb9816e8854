"""Reading operator-supplied and kubelet-written files: one clear error line for every way
it can go wrong, and never a hang or an unbounded read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from exporter.errors import UserError


def read_file_bytes(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    Opened without blocking and checked to be a regular file before reading, so that a
    FIFO (which would block until a writer appears) or a device such as ``/dev/zero``
    (which never ends) is refused instead of hanging or exhausting memory; the limit is
    enforced on what is read, not on the size the filesystem reports. Any failure is a
    ``UserError`` naming the file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UserError(f"{path}: not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise UserError(f"{path}: larger than {_size(max_bytes)}")
        return b"".join(chunks)
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_text_file(path: str | Path, max_bytes: int) -> str:
    """UTF-8 text of ``path`` (see ``read_file_bytes``); a binary file is a ``UserError``
    naming it."""
    try:
        return read_file_bytes(path, max_bytes).decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"
