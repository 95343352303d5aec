"""Certificates for the local control plane: one CA, the API server's serving certificate,
one client certificate per identity (so the audit log tells the writers apart) and the
service-account signing key."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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


def _new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys are generated in microseconds, RSA in tens of milliseconds each.
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


class CertificateAuthority:
    """A throwaway CA that lives in one directory of the local control plane."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = _new_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodepool-operator-local-ca")])
        now = datetime.datetime.now(datetime.UTC)
        self._name = name
        self._certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.certificate_path = directory / "ca.crt"
        self.certificate_path.write_bytes(
            self._certificate.public_bytes(serialization.Encoding.PEM)
        )

    def serving_pair(self, *, name: str, hosts: list[str]) -> KeyPair:
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        return self._issue(
            file_stem=name,
            subject=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]),
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            sans=sans,
        )

    def client_pair(self, identity: Identity, *, file_stem: str) -> KeyPair:
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in identity.groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, identity.user))
        return self._issue(
            file_stem=file_stem,
            subject=x509.Name(attributes),
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
            sans=[],
        )

    def _issue(
        self,
        *,
        file_stem: str,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName],
    ) -> KeyPair:
        key = _new_key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        certificate = builder.sign(self._key, hashes.SHA256())
        pair = KeyPair(
            certificate=self.directory / f"{file_stem}.crt",
            key=self.directory / f"{file_stem}.key",
        )
        pair.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def service_account_keys(self) -> KeyPair:
        """The token signing key pair (the "certificate" here is the PEM public key)."""
        key = _new_key()
        pair = KeyPair(certificate=self.directory / "sa.pub", key=self.directory / "sa.key")
        _write_key(key, pair.key)
        pair.certificate.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return pair
