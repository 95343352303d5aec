"""X.509 certificates: the one generator behind the local control plane's CA
(``cluster.pki``) and the metrics endpoint's self-signed certificate (``runtime.tls``).

It sits in the bottom layer, beneath everything else, because the runtime and the cluster
package may not import each other; it knows nothing of either.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["issue", "key_pem", "name", "new_key"]

#: Backdating: a peer whose clock is a little behind must not see a certificate from the future.
_BACKDATE = datetime.timedelta(minutes=5)


def new_key() -> ec.EllipticCurvePrivateKey:
    # P-256 keys are generated in microseconds, RSA in tens of milliseconds each.
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The private key as unencrypted PKCS#8 PEM (the form kube-apiserver and ssl read)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def name(common_name: str, *, organizations: Iterable[str] = ()) -> x509.Name:
    """A subject: O attributes (a client certificate's groups), then the CN (its user)."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def issue(
    *,
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    signing_key: ec.EllipticCurvePrivateKey,
    validity: datetime.timedelta,
    usage: x509.ObjectIdentifier | None = None,
    hosts: Iterable[str] = (),
) -> x509.Certificate:
    """A certificate for ``public_key``, signed by ``signing_key`` as ``issuer``.

    With ``usage`` (an extended key usage: server or client authentication) it is a leaf;
    without, a CA that may sign certificates. ``hosts`` become the subject alternative
    names: IP addresses where they parse as one, DNS names otherwise.
    """
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=usage is None, path_length=None), critical=True)
    )
    if usage is None:
        builder = builder.add_extension(_CA_KEY_USAGE, critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    sans = [_general_name(host) for host in dict.fromkeys(hosts)]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
