"""Certificates for the local control plane, envtest-style: one CA, a serving certificate
for 127.0.0.1/localhost, an admin client certificate in ``system:masters``, and a key pair
for service-account token signing. Writes PEM files; reuses them when already present.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=365)


@dataclasses.dataclass(frozen=True)
class CertPaths:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path

    @classmethod
    def under(cls, folder: Path) -> CertPaths:
        return cls(
            *(
                folder / n
                for n in (
                    "ca.crt",
                    "ca.key",
                    "apiserver.crt",
                    "apiserver.key",
                    "admin.crt",
                    "admin.key",
                    "sa.key",
                    "sa.pub",
                )
            )
        )

    def complete(self) -> bool:
        return all(p.exists() for p in dataclasses.astuple(self))


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def ensure_certs(folder: Path) -> CertPaths:
    """Create the PKI under ``folder`` unless it is already complete."""
    paths = CertPaths.under(folder)
    if paths.complete():
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)

    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agn-local-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, orgs: list[str], usage, sans: list[x509.GeneralName] | None = None):
        key = _key()
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)] + [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs
        ]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    serving_key, serving_cert = leaf(
        "kube-apiserver",
        [],
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ],
    )
    admin_key, admin_cert = leaf("agn-admin", ["system:masters"], ExtendedKeyUsageOID.CLIENT_AUTH)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pem = serialization.Encoding.PEM
    _write(paths.ca_key, _pem_key(ca_key))
    _write(paths.serving_key, _pem_key(serving_key))
    _write(paths.admin_key, _pem_key(admin_key))
    _write(paths.sa_key, _pem_key(sa_key))
    _write(paths.sa_pub, sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo))
    _write(paths.serving_cert, serving_cert.public_bytes(pem))
    _write(paths.admin_cert, admin_cert.public_bytes(pem))
    # The CA certificate is written last: its presence marks the set complete.
    _write(paths.ca_cert, ca_cert.public_bytes(pem))
    return paths
