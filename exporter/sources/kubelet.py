"""The kubelet's HTTPS endpoint (port 10250): ``/pods``, ``/configz`` and ``/metrics``.

Authenticates with the service-account bearer token (re-read on every request, because
projected tokens rotate) and verifies the serving certificate with a CA file, unless the
operator explicitly chose ``--kubelet.insecure-skip-verify``. Bodies are returned raw so
the caller can skip parsing when nothing changed.
"""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path
from typing import Final

import aiohttp

from exporter.errors import SourceError

SOURCE: Final = "kubelet"
OPERATIONS: Final = {SOURCE: ("pods", "configz", "metrics", "token", "tls")}  # what a poll reads
DEFAULT_TOKEN_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"
MAX_BODY: Final = 64 << 20

_FEATURE = re.compile(
    r'^kubernetes_feature_enabled\{(?P<labels>[^}]*)\}\s+(?P<value>[0-9.eE+-]+)', re.M)
_NAME = re.compile(r'name="([^"]*)"')


def parse_feature_metrics(text: str) -> dict[str, bool]:
    """``kubernetes_feature_enabled{name="X",stage="BETA"} 1`` lines → ``{"X": True}``."""
    gates: dict[str, bool] = {}
    for match in _FEATURE.finditer(text):
        name = _NAME.search(match["labels"])
        if name:
            try:
                gates[name.group(1)] = float(match["value"]) > 0
            except ValueError:
                continue
    return gates


class KubeletClient:
    def __init__(self, url: str, *, token_file: str | None = DEFAULT_TOKEN_FILE,
                 ca_file: str | None = None, insecure_skip_verify: bool = False,
                 timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.timeout = timeout
        if insecure_skip_verify:
            self._ssl: ssl.SSLContext | bool = False
        else:
            try:
                self._ssl = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise SourceError(SOURCE, "tls", f"CA file {ca_file}: {exc}") from None
        self._session: aiohttp.ClientSession | None = None

    def _token(self) -> str | None:
        if not self.token_file:
            return None
        try:
            return Path(self.token_file).read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SourceError(SOURCE, "token", f"{self.token_file}: {exc.strerror}") from None

    async def fetch(self, path: str) -> bytes:
        return bytes(await self.fetch_buffer(path))

    async def fetch_buffer(self, path: str) -> bytearray:
        """The body of ``path`` in the one buffer it was read into: a large body (``/pods``
        is ~10 KB a pod) is never held twice, as its chunks and their join (the peak of a
        read was twice the body)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout))
        operation = path.strip("/") or "root"
        headers = {"Accept": "application/json, text/plain"}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            async with self._session.get(self.url + path, headers=headers,
                                         ssl=self._ssl) as resp:
                if resp.status != 200:
                    said = (await resp.content.read(300)).decode("utf-8", "replace").strip()
                    hint = ""
                    if resp.status in (401, 403):
                        hint = (f" (grant get on nodes/{operation}, or nodes/proxy on kubelets "
                                "older than 1.36, to the exporter's service account)")
                    raise SourceError(SOURCE, operation,
                                      f"HTTP {resp.status} from {self.url}{path}{hint}: "
                                      f"{said[:200]}")
                # StreamReader.read(n) returns what has arrived so far, not the whole body:
                # read to the end, refusing bodies over the limit.
                body = bytearray()
                async for chunk in resp.content.iter_chunked(1 << 16):
                    if len(body) + len(chunk) > MAX_BODY:
                        raise SourceError(SOURCE, operation,
                                          f"body larger than {MAX_BODY} bytes")
                    body += chunk  # grown in place: no second copy while reading
                return body
        except TimeoutError:
            raise SourceError(SOURCE, operation, f"no answer from {self.url} within "
                              f"{self.timeout:g}s") from None
        except aiohttp.ClientConnectorCertificateError as exc:
            raise SourceError(SOURCE, operation, f"TLS verification of {self.url} failed "
                              f"({exc.certificate_error}); pass --kubelet.ca-file, or "
                              "--kubelet.insecure-skip-verify") from None
        except aiohttp.ClientConnectorError as exc:
            # Its own text ends in the repr of the SSL context: say what failed instead.
            raise SourceError(SOURCE, operation,
                              f"cannot connect to {self.url}: {_os_reason(exc)}") from None
        except aiohttp.ClientError as exc:
            raise SourceError(SOURCE, operation, f"{self.url}: {exc}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _os_reason(exc: aiohttp.ClientConnectorError) -> str:
    """The operating system's reason ("Connection refused"), not the connector's repr."""
    error = exc.os_error
    if error.errno is not None and error.errno > 0:
        # asyncio words a refused connect as "Connect call failed (...)": the number says why.
        return os.strerror(error.errno)
    return error.strerror or str(error) or type(error).__name__  # e.g. a failed lookup
