"""Certificates for the local control plane, kubeadm-style: one CA, a serving certificate for
127.0.0.1/localhost, an admin client certificate in ``system:masters``, a key pair for
service-account token signing, and etcd's mutual-TLS set (etcd's serving and peer
certificates, and the client certificate kube-apiserver presents to etcd).

Everything is written under the env's ``certs/`` folder (mode 0700, files 0600) and reused
when present. A set that lacks some pairs — say a state folder from before etcd served TLS —
gets the missing ones signed by its existing CA, so an env brought up earlier keeps its
kubeconfig. Nothing here starts processes or writes outside ``folder``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from xtask.record import Record

VALIDITY = dt.timedelta(days=365)
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class CertPaths(Record):
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path
    etcd_server_cert: Path
    etcd_server_key: Path
    etcd_peer_cert: Path
    etcd_peer_key: Path
    etcd_client_cert: Path  # kube-apiserver's (and env tooling's) client certificate for etcd
    etcd_client_key: Path

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
                    "etcd-server.crt",
                    "etcd-server.key",
                    "etcd-peer.crt",
                    "etcd-peer.key",
                    "apiserver-etcd-client.crt",
                    "apiserver-etcd-client.key",
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


def private_dir(folder: Path) -> Path:
    """Create ``folder`` (and parents) and make it readable by its owner only."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(PRIVATE_DIR_MODE)
    return folder


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a file only its owner can read: created 0600 (never readable by others,
    not even for a moment), never through a symlink planted at ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        os.write(fd, data)
    finally:
        os.close(fd)


_LOCALHOST = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]


class _Authority:
    """The env's CA: signs leaf certificates."""

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self.key = key
        self.cert = cert
        self.now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)

    @classmethod
    def create(cls) -> _Authority:
        key = _key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agn-local-ca")])
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @classmethod
    def load(cls, paths: CertPaths) -> _Authority:
        key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), f"{paths.ca_key} is not the env's EC key"
        return cls(key, x509.load_pem_x509_certificate(paths.ca_cert.read_bytes()))

    def leaf(
        self, cn: str, orgs: list[str], usages: list[x509.ObjectIdentifier], sans: list[x509.GeneralName] | None = None
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = _key()
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)] + [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs
        ]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now)
            .not_valid_after(self.now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, builder.sign(self.key, hashes.SHA256())


def _leaves(paths: CertPaths) -> list[tuple[Path, Path, str, list[str], list[x509.ObjectIdentifier], list]]:
    """Every leaf pair: (cert, key, common name, organizations, usages, SANs)."""
    server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    apiserver_sans = [*_LOCALHOST, x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default.svc")]
    return [
        (paths.serving_cert, paths.serving_key, "kube-apiserver", [], [server], apiserver_sans),
        (paths.admin_cert, paths.admin_key, "agn-admin", ["system:masters"], [client], []),
        # etcd's serving and peer certificates carry both usages, as kubeadm's do: etcd also
        # dials its own members with them.
        (paths.etcd_server_cert, paths.etcd_server_key, "agn-local-etcd", [], [server, client], _LOCALHOST),
        (paths.etcd_peer_cert, paths.etcd_peer_key, "agn-local-etcd", [], [server, client], _LOCALHOST),
        (paths.etcd_client_cert, paths.etcd_client_key, "kube-apiserver-etcd-client", [], [client], []),
    ]


def ensure_certs(folder: Path) -> CertPaths:
    """Create the PKI under ``folder``, or the pairs it lacks (signed by its existing CA)."""
    paths = CertPaths.under(folder)
    private_dir(folder)
    if paths.complete():
        return paths
    pem = serialization.Encoding.PEM
    # The CA certificate is written last: its presence marks a CA (and the set it signed) usable.
    fresh = not (paths.ca_cert.exists() and paths.ca_key.exists())
    ca = _Authority.create() if fresh else _Authority.load(paths)
    if fresh:
        write_private(paths.ca_key, _pem_key(ca.key))
    for cert_path, key_path, cn, orgs, usages, sans in _leaves(paths):
        if fresh or not (cert_path.exists() and key_path.exists()):
            key, cert = ca.leaf(cn, orgs, usages, sans)
            write_private(key_path, _pem_key(key))
            write_private(cert_path, cert.public_bytes(pem))
    if fresh or not (paths.sa_key.exists() and paths.sa_pub.exists()):
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_private(paths.sa_key, _pem_key(sa_key))
        write_private(
            paths.sa_pub, sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
    if fresh:
        write_private(paths.ca_cert, ca.cert.public_bytes(pem))
    return paths


def issue_client_certificate(
    paths: CertPaths, cert: Path, key: Path, *, user: str, groups: tuple[str, ...] = ()
) -> None:
    """Write a client certificate (and its key) for ``user`` in ``groups``, signed by the env's CA:
    the API server authenticates it as that user (a second identity for tests and for people
    who need one on the local runtime; it gets only the rights RBAC binds to ``user``)."""
    ca = _Authority.load(paths)
    pair_key, pair_cert = ca.leaf(user, list(groups), [ExtendedKeyUsageOID.CLIENT_AUTH])
    write_private(key, _pem_key(pair_key))
    write_private(cert, pair_cert.public_bytes(serialization.Encoding.PEM))
