"""The serving certificate of the metrics endpoint: a mounted one, else a self-signed one.

As controller-runtime's metrics server: with a certificate directory holding ``tls.crt``
and ``tls.key`` (a cert-manager Secret, say) those are served; without one, a self-signed
certificate is made at start, so the endpoint is encrypted from the first run. A scraper
then has to skip verification (Prometheus: ``tls_config.insecure_skip_verify``) or be
given a real certificate. The certificate comes from ``nodepool_operator.certificates``,
which also issues the local control plane's (``cluster.pki``).
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from nodepool_operator import certificates

__all__ = ["CERT_FILE", "KEY_FILE", "self_signed_pem", "server_context"]

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
SELF_SIGNED_VALIDITY = datetime.timedelta(days=365)


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
    key = certificates.new_key()
    name = certificates.name("nodepool-operator-metrics")
    cert = certificates.issue(
        subject=name,
        public_key=key.public_key(),
        issuer=name,
        signing_key=key,
        validity=SELF_SIGNED_VALIDITY,
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        hosts=hosts,
    )
    return cert.public_bytes(serialization.Encoding.PEM), certificates.key_pem(key)
