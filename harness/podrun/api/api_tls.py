"""The emulated API server over HTTPS, as in-cluster clients expect it.

`load_incluster_config` builds https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT and trusts only
the CA in the service-account volume. kmock speaks plain HTTP, so a TLS-terminating proxy on loopback
(its certificate for 127.0.0.1 and kubernetes.default.svc, signed by a throwaway CA) forwards each
connection to kmock. The bearer token is not checked: RBAC is not emulated (tests/deploy checks the Role
against the code statically).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import secrets
import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from harness.podrun.pods.envvars import ApiAccess


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None, *, ca: bool
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, signing_key = issuer or (name, key)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("kubernetes.default.svc"), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    return builder.sign(signing_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def server_context() -> tuple[ssl.SSLContext, bytes]:
    """(a server TLS context, the CA's PEM that verifies it)."""
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("podrun-cluster-ca", ca_key, None, ca=True)
    leaf = _cert("kube-apiserver", leaf_key, (ca.subject, ca_key), ca=False)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as d:
        cert_file, key_file = Path(d) / "tls.crt", Path(d) / "tls.key"
        cert_file.write_bytes(_pem(leaf) + _pem(ca))
        key_file.write_bytes(
            leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        ctx.load_cert_chain(cert_file, key_file)
    return ctx, _pem(ca)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@asynccontextmanager
async def tls_front(backend_host: str, backend_port: int) -> AsyncIterator[ApiAccess]:
    """Serve HTTPS on a free loopback port, forwarding to the plain-HTTP backend; yields how pods reach it."""
    ctx, ca_pem = server_context()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(backend_host, backend_port)
        except OSError:
            writer.close()
            return
        for task in (asyncio.create_task(_pipe(reader, up_writer)), asyncio.create_task(_pipe(up_reader, writer))):
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        yield ApiAccess(host="127.0.0.1", port=port, ca_pem=ca_pem, token=secrets.token_urlsafe(32))
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
