"""The one certificate generator: a CA, the leaves it signs, and self-signed leaves."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodepool_devtools.cluster import pki
from nodepool_operator import certificates
from nodepool_operator.runtime import tls


def test_a_leaf_signed_by_the_local_ca_verifies_and_names_its_hosts(tmp_path: Path) -> None:
    ca = pki.CertificateAuthority(tmp_path)
    pair = ca.serving_pair(name="kube-apiserver", hosts=["127.0.0.1", "localhost"])
    authority = x509.load_pem_x509_certificate(ca.certificate_path.read_bytes())
    leaf = x509.load_pem_x509_certificate(pair.certificate.read_bytes())

    leaf.verify_directly_issued_by(authority)
    assert authority.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert authority.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert pair.key.stat().st_mode & 0o777 == 0o600


def test_a_client_certificate_carries_user_and_groups(tmp_path: Path) -> None:
    ca = pki.CertificateAuthority(tmp_path)
    identity = pki.Identity("nodepool-operator", groups=("system:authenticated",))
    pair = ca.client_pair(identity, file_stem="operator")
    leaf = x509.load_pem_x509_certificate(pair.certificate.read_bytes())

    subject = leaf.subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "nodepool-operator"
    groups = [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert groups == ["system:authenticated"]
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_the_metrics_certificate_is_self_signed_for_server_auth() -> None:
    cert_pem, _ = tls.self_signed_pem(hosts=["localhost", "::1"])
    cert = x509.load_pem_x509_certificate(cert_pem)

    cert.verify_directly_issued_by(cert)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert lifetime == datetime.timedelta(days=365, minutes=5)


def test_a_ca_may_sign_and_names_no_usage_or_hosts() -> None:
    key = certificates.new_key()
    name = certificates.name("test-ca")
    ca = certificates.issue(
        subject=name,
        public_key=key.public_key(),
        issuer=name,
        signing_key=key,
        validity=datetime.timedelta(days=1),
    )
    extension_types = {type(e.value) for e in ca.extensions}
    assert extension_types == {x509.BasicConstraints, x509.KeyUsage}
