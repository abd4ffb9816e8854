"""``--web.config.file`` in the Prometheus exporter-toolkit format: TLS and basic auth.

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      min_version: TLS12            # TLS10..TLS13
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert, ...
      client_ca_file: ca.crt
    basic_auth_users:
      alice: $2y$10$...              # bcrypt hash
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

from exporter.errors import UserError

_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
             "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    # Successful checks by digest of the credentials: bcrypt costs ~100 ms by design, far
    # too much for every scrape. Only matches are cached, so guessing stays slow.
    _verified: set[bytes] = field(default_factory=set)

    def check(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header satisfies basic auth (always, without users)."""
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        key = hashlib.sha256(user.encode() + b"\0" + password.encode() + b"\0" + hashed).digest()
        if any(hmac.compare_digest(key, known) for known in self._verified):
            return True
        try:
            ok = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:
            return False
        if ok:
            self._verified.add(key)
        return ok


def _file(base: Path, value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise UserError(f"web config: {what} must be a file path")
    path = (base / value) if not Path(value).is_absolute() else Path(value)
    if not path.is_file():
        raise UserError(f"web config: {what} {path} does not exist")
    return str(path)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message on one line: the problem and where (its own text spans lines)."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


def _read(path: str) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise UserError(f"web config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"web config {path}: invalid YAML: {_yaml_problem(exc)}") from None
    if not isinstance(raw, dict):
        raise UserError(f"web config {path}: expected a mapping")
    unknown = set(raw) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise UserError(f"web config {path}: unknown keys {', '.join(sorted(unknown))}")
    return raw


def _choice(tls: dict[str, Any], key: str, default: str, known: dict[str, Any]) -> Any:
    value = tls.get(key, default)
    if not isinstance(value, str) or value not in known:
        raise UserError(f"web config: {key} must be one of {', '.join(known)}")
    return known[value]


def _client_verification(context: ssl.SSLContext, base: Path, tls: dict[str, Any]) -> None:
    context.verify_mode = _choice(tls, "client_auth_type", "NoClientCert", _CLIENT_AUTH)
    if tls.get("client_ca_file"):
        ca_file = _file(base, tls["client_ca_file"], "client_ca_file")
        try:
            context.load_verify_locations(ca_file)
        except ssl.SSLError as exc:
            raise UserError(f"web config: cannot load client_ca_file {ca_file}: {exc}"
                            ) from None
    elif context.verify_mode != ssl.CERT_NONE:
        raise UserError(f"web config: client_auth_type {tls['client_auth_type']} needs "
                        "client_ca_file")


def _tls_context(base: Path, tls: Any) -> ssl.SSLContext:
    if not isinstance(tls, dict):
        raise UserError("web config: tls_server_config must be a mapping")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(_file(base, tls.get("cert_file"), "cert_file"),
                                _file(base, tls.get("key_file"), "key_file"))
    except ssl.SSLError as exc:
        raise UserError(f"web config: cannot load certificate/key: {exc}") from None
    context.minimum_version = _choice(tls, "min_version", "TLS12", _VERSIONS)
    _client_verification(context, base, tls)
    return context


def _users(users: Any) -> dict[str, bytes]:
    if not isinstance(users, dict):
        raise UserError("web config: basic_auth_users must map user names to bcrypt hashes")
    hashes = {}
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith("$2"):
            raise UserError(f"web config: the password of {user!r} is not a bcrypt hash")
        hashes[str(user)] = hashed.encode()
    return hashes


def load_web_config(path: str | None) -> WebConfig:
    """The config of ``--web.config.file`` (none: no TLS, no auth); every mistake in it is
    one ``UserError`` line."""
    if not path:
        return WebConfig()
    raw = _read(path)
    tls = raw.get("tls_server_config")
    return WebConfig(ssl_context=_tls_context(Path(path).parent, tls) if tls else None,
                     users=_users(raw.get("basic_auth_users") or {}))
