"""Basic auth against the bcrypt hashes of ``basic_auth_users``, without letting guessers
stall the server.

bcrypt costs tens of milliseconds by design. Run on the event loop, every wrong password
blocked every scrape for that long. So hashes are checked in a dedicated thread (one, as
exporter-toolkit checks one at a time: guessers never get more than one core, the event
loop keeps the other), behind a bounded queue; a guess that finds the queue full waits a
moment for a place and is then told "busy" (503). That wait matters as much as the queue:
answered at once, a flood of guessers would keep the event loop busy with nothing but
refusals. A successful check is remembered under a keyed digest of the credentials, so a
legitimate scraper pays for bcrypt once, not on every scrape; failures are never
remembered. An unknown user is checked against a decoy hash of the same cost, so the
answer takes as long as for a known user with a wrong password.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import enum
import hashlib
import hmac
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType


class Verdict(enum.Enum):
    ALLOWED = "allowed"
    DENIED = "denied"
    # The queue of checks stayed full: answered 503 rather than queued without end.
    BUSY = "busy"


def bcrypt_cost(hashed: bytes) -> int:
    """The cost factor of a ``$2?$NN$...`` hash."""
    return int(hashed.split(b"$")[2])


def _credentials(header: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) of a ``Basic`` Authorization header; the scheme is case-insensitive
    (RFC 7617)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
        decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else None


def _lowest_priority() -> None:
    """Lower the calling thread to the lowest CPU priority (Linux niceness is per thread):
    on a busy node, bcrypt for guessers gets the spare CPU, not the event loop's."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


class BasicAuth:
    """Checks ``Authorization`` headers against ``users`` (name → bcrypt hash)."""

    def __init__(self, users: Mapping[str, bytes], *, workers: int = 1, max_pending: int = 32,
                 busy_wait: float = 1.0, cache_size: int = 1024) -> None:
        # Loaded here, not with the module: only a web config with users needs bcrypt, and
        # every exporter imports this module.
        import bcrypt

        self._bcrypt: ModuleType = bcrypt
        self._users = {user.encode(): hashed for user, hashed in users.items()}
        cost = max(bcrypt_cost(hashed) for hashed in users.values())
        self._decoy = bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=cost))
        self._key = secrets.token_bytes(32)
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._cache_size = cache_size
        self._queue = asyncio.Semaphore(max_pending)
        self._busy_wait = busy_wait
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="podres-auth",
                                        initializer=_lowest_priority)

    def _digest(self, user: bytes, password: bytes) -> bytes:
        # Keyed with a per-process secret, so the cached digests say nothing about the
        # passwords; length-prefixed, so ("a:b", "c") and ("a", "b:c") never collide.
        message = len(user).to_bytes(4, "big") + user + password
        return hmac.new(self._key, message, hashlib.sha256).digest()

    async def verify(self, header: str | None) -> Verdict:
        credentials = _credentials(header)
        if credentials is None:
            return Verdict.DENIED
        user, password = credentials
        digest = self._digest(user, password)
        if digest in self._verified:
            self._verified.move_to_end(digest)
            return Verdict.ALLOWED
        try:
            await asyncio.wait_for(self._queue.acquire(), self._busy_wait)
        except TimeoutError:
            return Verdict.BUSY
        known = self._users.get(user)
        try:
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(self._pool, self._check_hash, password,
                                            known if known is not None else self._decoy)
        finally:
            self._queue.release()
        if not ok or known is None:
            return Verdict.DENIED
        self._verified[digest] = None
        if len(self._verified) > self._cache_size:
            self._verified.popitem(last=False)
        return Verdict.ALLOWED

    def _check_hash(self, password: bytes, hashed: bytes) -> bool:
        try:
            return bool(self._bcrypt.checkpw(password, hashed))
        except ValueError:  # bcrypt refuses passwords with NUL bytes, among others
            return False
