"""Certificates and keys for the test control plane: a throw-away CA, the API server's serving
certificate, client certificates per component, and the service-account signing key.

Everything is generated per test session, so no key material lives in the repository.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Short-lived on purpose: a test session lasts minutes.
_VALIDITY = dt.timedelta(days=1)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: KeyPair
    serving: KeyPair
    sa_key: Path  # private key that signs service-account tokens
    sa_pub: Path  # its public half, which the API server verifies tokens with
    folder: Path

    def client(self, name: str, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate for `user` in `groups` (CN and O, as the API server reads them)."""
        return _issue(self, name, user, groups)

    def server(self, name: str, common: str, *, ips: tuple[str, ...] = (), dns: tuple[str, ...] = ()) -> KeyPair:
        """A serving certificate signed by the cluster CA (e.g. for a webhook the API server calls)."""
        if not ips and not dns:
            raise ValueError(f"serving certificate {name}: give at least one IP address or DNS name")
        return _issue(self, name, common, (), server_ips=ips, server_names=dns)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _load_ca(pki: Pki) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    key = serialization.load_pem_private_key(pki.ca.key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def _issue(
    pki: Pki,
    name: str,
    common: str,
    orgs: tuple[str, ...],
    *,
    server_ips: tuple[str, ...] = (),
    server_names: tuple[str, ...] = (),
) -> KeyPair:
    ca_cert, ca_key = _load_ca(pki)
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server_ips or server_names else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = _builder(_name(common, orgs), ca_cert.subject, key.public_key()).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    if server_ips or server_names:
        alt: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
        alt += [x509.DNSName(n) for n in server_names]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = KeyPair(pki.folder / f"{name}.crt", pki.folder / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pair.key, key)
    return pair


def make_pki(folder: Path) -> Pki:
    """A CA, a serving certificate for the API server on loopback, and the service-account keys."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    subject = _name("cudanalyst-test-ca")
    ca_cert = (
        _builder(subject, subject, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca = KeyPair(folder / "ca.crt", folder / "ca.key")
    ca.cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca.key, ca_key)

    # RSA for service-account tokens: RS256 is what every token consumer accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_priv, sa_pub = folder / "sa.key", folder / "sa.pub"
    _write_key(sa_priv, sa_key)
    sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    partial = Pki(ca=ca, serving=ca, sa_key=sa_priv, sa_pub=sa_pub, folder=folder)
    serving = _issue(
        partial, "apiserver", "kube-apiserver", (),
        server_ips=("127.0.0.1",),
        server_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
    )
    return Pki(ca=ca, serving=serving, sa_key=sa_priv, sa_pub=sa_pub, folder=folder)
