"""The serving certificate of the metrics endpoint: a mounted one, else a self-signed one.

As controller-runtime's metrics server: with a certificate directory holding ``tls.crt``
and ``tls.key`` (a cert-manager Secret, say) those are served; without one, a self-signed
certificate is made at start, so the endpoint is encrypted from the first run. A scraper
then has to skip verification (Prometheus: ``tls_config.insecure_skip_verify``) or be
given a real certificate. (``cluster.pki`` issues certificates from a CA for the local
control plane; the layering keeps the runtime from it, and this needs no CA.)
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CERT_FILE", "KEY_FILE", "self_signed_pem", "server_context"]

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
SELF_SIGNED_DAYS = 365


def server_context(cert_dir: Path | None) -> tuple[ssl.SSLContext, str]:
    """A TLS 1.2+ server context, and where its certificate came from (for the log)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir is not None:
        context.load_cert_chain(cert_dir / CERT_FILE, cert_dir / KEY_FILE)
        return context, str(cert_dir)
    cert, key = self_signed_pem(hosts=["localhost", "127.0.0.1", "::1", socket.gethostname()])
    # load_cert_chain reads files only: write them for the call, owner-only, then drop them.
    with tempfile.TemporaryDirectory(prefix="metrics-tls-") as directory:
        cert_path, key_path = Path(directory, CERT_FILE), Path(directory, KEY_FILE)
        cert_path.write_bytes(cert)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        context.load_cert_chain(cert_path, key_path)
    return context, "self-signed"


def self_signed_pem(*, hosts: list[str]) -> tuple[bytes, bytes]:
    """A fresh P-256 key and a certificate for ``hosts`` signed by itself, both in PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodepool-operator-metrics")])
    sans: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=SELF_SIGNED_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem
