"""Reading operator-supplied files: one clear error line for every way it can go wrong."""

from __future__ import annotations

from pathlib import Path

from exporter.errors import UserError


def read_text_file(path: str | Path, max_bytes: int) -> str:
    """UTF-8 text of ``path``; a missing, unreadable, binary or absurdly large file is a
    ``UserError`` naming it."""
    try:
        if Path(path).stat().st_size > max_bytes:
            raise UserError(f"{path}: larger than {max_bytes >> 20} MiB")
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
