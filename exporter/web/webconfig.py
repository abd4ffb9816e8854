"""``--web.config.file`` in the Prometheus exporter-toolkit format: TLS, basic auth and
response headers. Unknown keys are refused, as exporter-toolkit refuses them.

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      min_version: TLS12            # TLS10..TLS13 (max_version likewise)
      client_auth_type: RequireAndVerifyClientCert   # or NoClientCert, ...
      client_ca_file: ca.crt
    http_server_config:
      headers:
        X-Frame-Options: deny
    basic_auth_users:
      alice: $2y$10$...              # bcrypt hash
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.errors import UserError
from exporter.web.basicauth import BasicAuth

if TYPE_CHECKING:
    import yaml

_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
             "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "RequireClientCert": ssl.CERT_REQUIRED,  # exporter-toolkit's older spelling
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    # http_server_config.headers: added to every response.
    headers: dict[str, str] = field(default_factory=dict)

    def basic_auth(self) -> BasicAuth | None:
        """The checker of ``basic_auth_users`` (``None`` without users: every request
        passes)."""
        return BasicAuth(self.users) if self.users else None


# What exporter-toolkit reads, and what of it this exporter does: a key it does not know is a
# typo (refused, with the nearest known key), a key it knows but this server cannot honour
# is refused too, with the reason, so that no setting is silently dropped.
_TOP = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
        "max_version", "prefer_server_cipher_suites")
_HTTP = ("http2", "headers")
_UNSUPPORTED = {
    "rate_limit": "is not supported; put a rate-limiting proxy in front instead",
    "cert": "(inline certificate) is not supported; use cert_file",
    "key": "(inline key) is not supported; use key_file",
    "client_ca": "(inline CA) is not supported; use client_ca_file",
    "cipher_suites": "is not supported (Go cipher suite names); remove it",
    "curve_preferences": "is not supported; remove it",
    "client_allowed_sans": "is not supported; issue client certificates from a dedicated "
                           "client_ca_file instead",
}
# The response headers exporter-toolkit lets a config set, with their allowed values
# (compared case-insensitively here; None: any value).
_HEADERS: dict[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}
_BCRYPT = re.compile(r"\$2[abxy]?\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


def _check_keys(section: str, raw: dict[Any, Any], known: tuple[str, ...]) -> None:
    for key in raw:
        if key in known:
            continue
        name = _one_line(str(key))
        if name in _UNSUPPORTED:
            raise UserError(f"web config: {section}{name} {_UNSUPPORTED[name]}")
        import difflib  # a typo's hint only

        near = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {near[0]}?)" if near else f" (known: {', '.join(known)})"
        raise UserError(f"web config: unknown key {section}{name}{hint}")


def _one_line(text: str) -> str:
    """Text from the file, shown in a one-line error: control characters escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


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
    # Loaded only when a web config file is given: most nodes run without one.
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise UserError(f"web config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"web config {path}: invalid YAML: {_yaml_problem(exc)}") from None
    except UnicodeDecodeError:
        raise UserError(f"web config {path}: not UTF-8 text") from None
    except RecursionError:
        raise UserError(f"web config {path}: invalid YAML: nested too deeply") from None
    except ValueError as exc:  # an integer past Python's digit limit, and the like
        raise UserError(f"web config {path}: invalid YAML: {_one_line(str(exc))}") from None
    if not isinstance(raw, dict):
        raise UserError(f"web config {path}: expected a mapping")
    _check_keys("", raw, _TOP)
    return raw


def _choice(tls: dict[str, Any], key: str, default: str, known: dict[str, Any]) -> Any:
    value = tls.get(key, default)
    if not isinstance(value, str) or value not in known:
        raise UserError(f"web config: {key} must be one of {', '.join(known)}")
    return known[value]


def _client_verification(context: ssl.SSLContext, base: Path, tls: dict[str, Any]) -> None:
    context.verify_mode = _choice(tls, "client_auth_type", "NoClientCert", _CLIENT_AUTH)
    if tls.get("client_ca_file"):
        if context.verify_mode == ssl.CERT_NONE:
            # As exporter-toolkit: a CA without a policy is a half-written config.
            raise UserError("web config: client_ca_file is set but client_auth_type is "
                            "NoClientCert")
        ca_file = _file(base, tls["client_ca_file"], "client_ca_file")
        try:
            context.load_verify_locations(ca_file)
        except ssl.SSLError as exc:
            raise UserError(f"web config: cannot load client_ca_file {ca_file}: {exc}"
                            ) from None
    elif context.verify_mode != ssl.CERT_NONE:
        raise UserError(f"web config: client_auth_type {tls['client_auth_type']} needs "
                        "client_ca_file")


def _boolean(section: dict[str, Any], key: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise UserError(f"web config: {key} must be true or false")
    return value


def _tls_context(base: Path, tls: Any) -> ssl.SSLContext:
    if not isinstance(tls, dict):
        raise UserError("web config: tls_server_config must be a mapping")
    _check_keys("tls_server_config.", tls, _TLS)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(_file(base, tls.get("cert_file"), "cert_file"),
                                _file(base, tls.get("key_file"), "key_file"))
    except ssl.SSLError as exc:
        raise UserError(f"web config: cannot load certificate/key: {exc}") from None
    context.minimum_version = _choice(tls, "min_version", "TLS12", _VERSIONS)
    context.maximum_version = _choice(tls, "max_version", "TLS13", _VERSIONS)
    if context.maximum_version < context.minimum_version:
        raise UserError("web config: max_version is below min_version")
    if _boolean(tls, "prefer_server_cipher_suites", True):
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    _client_verification(context, base, tls)
    return context


def _headers(http: Any) -> dict[str, str]:
    if not isinstance(http, dict):
        raise UserError("web config: http_server_config must be a mapping")
    _check_keys("http_server_config.", http, _HTTP)
    # This server speaks HTTP/1.1 only: http2 is accepted as exporter-toolkit's switch that
    # allows HTTP/2, and either value serves HTTP/1.1.
    _boolean(http, "http2", True)
    headers = http.get("headers") or {}
    if not isinstance(headers, dict):
        raise UserError("web config: http_server_config.headers must map header names to "
                        "values")
    for name, value in headers.items():
        _check_header(name, value)
    return {str(name): str(value) for name, value in headers.items()}


def _check_header(name: Any, value: Any) -> None:
    if name not in _HEADERS:
        raise UserError(f"web config: HTTP header {name!r} cannot be configured "
                        f"(allowed: {', '.join(_HEADERS)})")
    allowed = _HEADERS[name]
    if not isinstance(value, str) or "\n" in value or "\r" in value or (
            allowed is not None and value.lower() not in allowed):
        expected = f"one of {', '.join(allowed)}" if allowed else "a one-line string"
        raise UserError(f"web config: header {name} must be {expected}")


def _users(users: Any) -> dict[str, bytes]:
    if not isinstance(users, dict):
        raise UserError("web config: basic_auth_users must map user names to bcrypt hashes")
    hashes = {}
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise UserError(f"web config: the password of {user!r} is not a bcrypt hash")
        if ":" in str(user):
            raise UserError(f"web config: user name {user!r} contains ':', which basic "
                            "auth cannot carry")
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
                     users=_users(raw.get("basic_auth_users") or {}),
                     headers=_headers(raw.get("http_server_config") or {}))
