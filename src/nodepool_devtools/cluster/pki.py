"""Certificates for the local control plane: one CA, the API server's serving certificate,
one client certificate per identity (so the audit log tells the writers apart) and the
service-account signing key."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from nodepool_operator import certificates

__all__ = ["CertificateAuthority", "Identity", "KeyPair"]

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Identity:
    """A user of the API server, as client certificates express it (CN = user, O = groups)."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class KeyPair:
    certificate: Path
    key: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(certificates.key_pem(key))
    path.chmod(0o600)


class CertificateAuthority:
    """A throwaway CA that lives in one directory of the local control plane."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = certificates.new_key()
        self._name = certificates.name("nodepool-operator-local-ca")
        self._certificate = certificates.issue(
            subject=self._name,
            public_key=self._key.public_key(),
            issuer=self._name,
            signing_key=self._key,
            validity=VALIDITY,
        )
        self.certificate_path = directory / "ca.crt"
        self.certificate_path.write_bytes(
            self._certificate.public_bytes(serialization.Encoding.PEM)
        )

    def serving_pair(self, *, name: str, hosts: list[str]) -> KeyPair:
        return self._issue(
            file_stem=name,
            subject=certificates.name(name),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            hosts=hosts,
        )

    def client_pair(self, identity: Identity, *, file_stem: str) -> KeyPair:
        return self._issue(
            file_stem=file_stem,
            subject=certificates.name(identity.user, organizations=identity.groups),
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            hosts=[],
        )

    def _issue(
        self,
        *,
        file_stem: str,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        hosts: list[str],
    ) -> KeyPair:
        key = certificates.new_key()
        certificate = certificates.issue(
            subject=subject,
            public_key=key.public_key(),
            issuer=self._name,
            signing_key=self._key,
            validity=VALIDITY,
            usage=usage,
            hosts=hosts,
        )
        pair = KeyPair(
            certificate=self.directory / f"{file_stem}.crt",
            key=self.directory / f"{file_stem}.key",
        )
        pair.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def service_account_keys(self) -> KeyPair:
        """The token signing key pair (the "certificate" here is the PEM public key)."""
        key = certificates.new_key()
        pair = KeyPair(certificate=self.directory / "sa.pub", key=self.directory / "sa.key")
        _write_key(key, pair.key)
        pair.certificate.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return pair
