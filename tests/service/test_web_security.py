"""TLS and basic auth from ``--web.config.file`` (exporter-toolkit format), checked with a
real TLS client that trusts only the test's CA. Certificates and bcrypt hashes are made
here, per test."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import subprocess
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.conftest import StartSim
from tests.service.conftest import (
    CLI,
    TOKEN,
    RunServe,
    Served,
    basic_auth,
    scenario_root,
    value,
)

ROUTES = ("/", "/metrics", "/healthz", "/readyz", "/api/v1/ledger", "/api/v1/cpumap",
          "/runbook")


class CA:
    """A throwaway certificate authority that issues server and client certificates."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "podres test CA")])
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()),
                           critical=False)
            .sign(self.key, hashes.SHA256()))
        self.path = directory / "ca.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, client: bool = False) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.key.public_key()), critical=False)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
                critical=False))
        if not client:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return cert_path, key_path

    def client_context(self, *, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.path))
        if maximum is not None:
            context.maximum_version = maximum
        return context


def hash_password(password: str, prefix: bytes = b"$2b$") -> str:
    """A bcrypt hash as htpasswd (``$2y$``) or Go (``$2a$``) would write it."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4))
    return (prefix + hashed[4:]).decode()


@pytest.fixture
def ca(short_tmp: Path) -> CA:
    return CA(short_tmp)


def write_config(directory: Path, text: str) -> Path:
    path = directory / "web.yml"
    path.write_text(text)
    return path


async def serve_with(start_sim: StartSim, run_serve: RunServe, config: Path,
                     client_ssl: ssl.SSLContext | bool | None,
                     auth: str | None) -> Served:
    directory = scenario_root() / "sidecar-hybrid"
    sim = await start_sim(directory, http=True, token=TOKEN)
    served = await run_serve(sim, "--topology", str(directory / "topology.json"),
                             "--poll.interval", "1m", "--web.config.file", str(config),
                             client_ssl=client_ssl, auth=auth)
    await served.wait_for(lambda s: value(s, "podres_up") == 1.0, what="first poll")
    return served


async def test_tls_and_basic_auth(start_sim: StartSim, run_serve: RunServe, ca: CA,
                                  short_tmp: Path) -> None:
    cert, key = ca.issue("server")
    config = write_config(short_tmp, f"""
tls_server_config:
  cert_file: {cert.name}
  key_file: {key.name}
  min_version: TLS12
basic_auth_users:
  alice: {hash_password("correct horse")}
  bob: '{hash_password("battery staple", b"$2y$")}'
  carol: '{hash_password("paper clip", b"$2a$")}'
  jürgen: {hash_password("pässwörd 🙂:with colon")}
""")
    good = basic_auth("alice", "correct horse")
    served = await serve_with(start_sim, run_serve, config, ca.client_context(), good)
    assert served.url.startswith("https://")

    for route in ROUTES:
        status, _ = await served.get(route)
        assert status == 200, route
        status, _ = await served.get(route, auth=None)
        assert status == 401, route
        status, _ = await served.get(route, auth=basic_auth("alice", "wrong"))
        assert status == 401, route
    async with served.session.get(served.url + "/metrics", ssl=served.ssl) as response:
        assert response.status == 401
        assert response.headers["WWW-Authenticate"].startswith("Basic ")
    for user, password in (("bob", "battery staple"), ("carol", "paper clip"),
                           ("jürgen", "pässwörd 🙂:with colon")):
        status, _ = await served.get("/metrics", auth=basic_auth(user, password))
        assert status == 200, user
    for auth in (basic_auth("mallory", "correct horse"),
                 basic_auth("bob", "correct horse"), basic_auth("alice", ""),
                 basic_auth("alice", "correct horse "), "Bearer correct horse"):
        status, _ = await served.get("/metrics", auth=auth)
        assert status == 401, auth
    # Repeated good credentials are served from the verification cache, wrong ones never.
    for _ in range(3):
        assert (await served.get("/metrics"))[0] == 200
        assert (await served.get("/metrics", auth=basic_auth("alice", "x")))[0] == 401
    status, _ = await served.get("/metrics", headers={"Authorization": "Basic !!!notb64"},
                                 auth=None)
    assert status == 401

    # No TLS when TLS is required: refused.
    plain = "http://" + served.url.removeprefix("https://")
    with pytest.raises(aiohttp.ClientError):
        async with served.session.get(plain + "/metrics",
                                      headers={"Authorization": good}) as response:
            await response.read()
    # A client that does not trust the CA refuses the server.
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await served.get("/metrics", ssl=ssl.create_default_context())
    # Below min_version: refused.
    cfg13 = write_config(short_tmp, f"""
tls_server_config:
  cert_file: {cert.name}
  key_file: {key.name}
  min_version: TLS13
""")
    served13 = await serve_with(start_sim, run_serve, cfg13, ca.client_context(), None)
    assert (await served13.get("/metrics"))[0] == 200
    with pytest.raises(aiohttp.ClientError):
        await served13.get("/metrics",
                           ssl=ca.client_context(maximum=ssl.TLSVersion.TLSv1_2))


async def test_client_certificates(start_sim: StartSim, run_serve: RunServe, ca: CA,
                                   short_tmp: Path) -> None:
    cert, key = ca.issue("server")
    client_cert, client_key = ca.issue("scraper", client=True)
    config = write_config(short_tmp, f"""
tls_server_config:
  cert_file: {cert}
  key_file: {key}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {ca.path}
""")
    with_cert = ca.client_context()
    with_cert.load_cert_chain(client_cert, client_key)
    served = await serve_with(start_sim, run_serve, config, with_cert, None)
    assert (await served.get("/metrics"))[0] == 200
    with pytest.raises(aiohttp.ClientError):
        await served.get("/metrics", ssl=ca.client_context())
    # A certificate from another CA is not accepted either.
    other = CA(short_tmp / "other")
    stranger_cert, stranger_key = other.issue("stranger", client=True)
    stranger = ca.client_context()
    stranger.load_cert_chain(stranger_cert, stranger_key)
    with pytest.raises(aiohttp.ClientError):
        await served.get("/metrics", ssl=stranger)


async def test_basic_auth_without_tls(start_sim: StartSim, run_serve: RunServe,
                                      short_tmp: Path) -> None:
    config = write_config(short_tmp, f"basic_auth_users:\n  prom: {hash_password('s3cret')}\n")
    served = await serve_with(start_sim, run_serve, config, None,
                              basic_auth("prom", "s3cret"))
    assert served.url.startswith("http://")
    assert (await served.get("/api/v1/ledger"))[0] == 200
    assert (await served.get("/api/v1/ledger", auth=None))[0] == 401


BAD_CONFIGS = {
    "invalid-yaml": "tls_server_config: [unclosed\n  cert_file: x\n",
    "not-a-mapping": "- just\n- a list\n",
    "unknown-key": "tls_server_confg:\n  cert_file: a\n",
    "missing-cert": "tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n",
    "plaintext-password": "basic_auth_users:\n  alice: hunter2\n",
    "bad-min-version": "tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                       "  min_version: SSL3\n",
    "client-auth-without-ca": "tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                              "  client_auth_type: RequireAndVerifyClientCert\n",
    "client-ca-not-pem": "tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                         "  client_auth_type: RequireAndVerifyClientCert\n"
                         "  client_ca_file: KEY\n",
    "min-version-a-list": "tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                          "  min_version: [TLS12]\n",
    "users-not-a-mapping": "basic_auth_users: [alice]\n",
    "tls-not-a-mapping": "tls_server_config: yes\n",
    "key-not-matching": "tls_server_config:\n  cert_file: CERT\n  key_file: CERT\n",
    # Typos refused, never ignored: ignored, the first one served without any client
    # certificate check, the second one kept TLS 1.2.
    "client-auth-typo": "tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                        "  client_auth: RequireAndVerifyClientCert\n",
    "min-version-typo": "tls_server_config:\n  cert_file: CERT\n  key_file: KEY\n"
                        "  min_versoin: TLS13\n",
    "http-server-config-typo": "http_server_config:\n  header:\n    X-Frame-Options: deny\n",
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_web_config_is_one_line(case: str, ca: CA, short_tmp: Path) -> None:
    cert, key = ca.issue("server")
    text = BAD_CONFIGS[case].replace("CERT", str(cert)).replace("KEY", str(key))
    config = write_config(short_tmp, text)
    run = subprocess.run([CLI, "serve", "--web.config.file", str(config),
                          "--web.listen-address", "127.0.0.1:0", "--history.url", "off",
                          "--podresources.socket", str(short_tmp / "none.sock")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("podres-exporter serve: error: web config"), lines[0]


async def test_json_errors_are_never_sniffed(start_sim: StartSim, run_serve: RunServe,
                                             short_tmp: Path) -> None:
    """A JSON error may echo the request; ``X-Content-Type-Options: nosniff`` on every
    answer keeps a browser from reading it as HTML (issue 33, Headers)."""
    served = await serve_with(start_sim, run_serve,
                              write_config(short_tmp, "http_server_config: {}\n"), None, None)
    for path in ("/api/v1/cpuload", "/api/v1/ledger", "/nope<script>"):
        async with served.session.get(served.url + path) as resp:
            assert resp.headers.get("X-Content-Type-Options") == "nosniff", path
