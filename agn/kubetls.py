"""A kubeconfig's TLS material kept in memory, never in a temporary file.

The official client's kubeconfig loader writes every ``*-data`` field (the CA, the client
certificate and the client *key*) to files made with ``tempfile.mkstemp`` and removes them only
at interpreter exit — which a process stopped by a signal or ending with ``os._exit`` never
reaches, so copies of the admin key piled up in ``/tmp``. Here the selected context's cluster
and user are handed to the loader without those fields; afterwards the CA goes to the client
configuration as data (``ca_cert_data``, which urllib3 passes to ``load_verify_locations``) and
the client certificate and key as anonymous in-memory files (``memfd_create``, opened by
OpenSSL through ``/proc/self/fd/N``), which vanish when closed and are never linked into any
folder. Certificates an ``exec`` credential plugin returns go through the loader's own
temporary files, in a private folder that is read back into memory and removed at once.

Plain data in, plain data out: this module never imports ``kubernetes`` (:mod:`agn.kube` is
that boundary) and holds no connection.
"""

from __future__ import annotations

import base64
import binascii
import copy
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_CLUSTER_FIELDS = ("certificate-authority", "certificate-authority-data")
_USER_FIELDS = ("client-certificate", "client-certificate-data", "client-key", "client-key-data")


def _entry(config: dict[str, Any], section: str, name: object) -> dict[str, Any] | None:
    for item in config.get(section) or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return None


def _decoded(body: dict[str, Any], field: str, where: str) -> bytes | None:
    value = body.get(field)
    if not value:
        return None
    try:
        return base64.b64decode("".join(str(value).split()), validate=True)  # line breaks allowed, as in Go
    except (binascii.Error, ValueError):
        raise ValueError(f"{field} of {where} is not valid base64") from None


class TlsMaterial:
    """The selected context's CA, client certificate and key, in memory."""

    def __init__(self, *, ca: bytes | None, cert: bytes | None, key: bytes | None) -> None:
        self.ca = ca
        self.cert = cert
        self.key = key
        self._fds: list[int] = []

    def _memfile(self, name: str, data: bytes) -> str:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        self._fds.append(fd)
        os.write(fd, data)
        return f"/proc/self/fd/{fd}"

    def apply(self, cfg: Any) -> None:
        """Put the material into a ``kubernetes.client.Configuration`` the loader has filled."""
        if not str(cfg.host or "").startswith("https"):
            return  # the loader ignores TLS fields for plain http; so does this
        if self.ca is not None:
            cfg.ssl_ca_cert = None
            cfg.ca_cert_data = self.ca.decode(errors="replace")  # a str: PEM (bytes would mean DER)
        if self.cert is not None and self.key is not None and not cfg.cert_file:
            cfg.cert_file = self._memfile("agn-client-cert", self.cert)
            cfg.key_file = self._memfile("agn-client-key", self.key)

    def adopt_files(self, cfg: Any, folder: Path) -> None:
        """Move files the loader wrote under ``folder`` (an exec plugin's certificates) into memory."""
        for attr in ("ssl_ca_cert", "cert_file", "key_file"):
            path = getattr(cfg, attr, None)
            if path and Path(path).parent == folder:
                data = Path(path).read_bytes()
                if attr == "ssl_ca_cert":
                    cfg.ssl_ca_cert = None
                    cfg.ca_cert_data = data.decode(errors="replace")
                else:
                    setattr(cfg, attr, self._memfile(f"agn-{attr}", data))

    def keep_open_for(self, owner: object) -> None:
        """Close the in-memory files when ``owner`` (the API client using them) is collected."""
        weakref.finalize(owner, _close_all, list(self._fds))

    def close(self) -> None:
        _close_all(self._fds)
        self._fds = []


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def without_tls_data(config: dict[str, Any], context: str) -> tuple[dict[str, Any], TlsMaterial]:
    """A copy of ``config`` whose ``context``'s cluster and user carry no TLS data fields, and
    that material. A ``*-data`` field wins over its file field, as in kubectl; a file field
    alone stays for the loader (it names a file the user keeps, nothing is copied)."""
    out = copy.copy(config)
    ctx = _entry(config, "contexts", context)
    body = (ctx or {}).get("context") or {}
    ca = cert = key = None
    cluster = _entry(config, "clusters", body.get("cluster"))
    if cluster is not None and isinstance(cluster.get("cluster"), dict):
        fields = cluster["cluster"]
        ca = _decoded(fields, "certificate-authority-data", f"cluster {cluster['name']!r}")
        if ca is not None:
            out["clusters"] = _replaced(config["clusters"], cluster, "cluster", _CLUSTER_FIELDS)
    user = _entry(config, "users", body.get("user"))
    if user is not None and isinstance(user.get("user"), dict):
        fields = user["user"]
        cert = _decoded(fields, "client-certificate-data", f"user {user['name']!r}")
        key = _decoded(fields, "client-key-data", f"user {user['name']!r}")
        if cert is not None and key is not None:
            out["users"] = _replaced(config["users"], user, "user", _USER_FIELDS)
        else:
            cert = key = None  # half a pair: the loader decides (and says what is missing)
    return out, TlsMaterial(ca=ca, cert=cert, key=key)


def _replaced(items: list, entry: dict[str, Any], key: str, fields: tuple[str, ...]) -> list:
    stripped = dict(entry)
    stripped[key] = {k: v for k, v in entry[key].items() if k not in fields}
    return [stripped if item is entry else item for item in items]


@contextmanager
def private_temp_folder() -> Iterator[Path]:
    """A folder only this user can read, for the few files the loader still writes (an exec
    plugin's certificates); removed, with everything in it, when the block ends."""
    folder = Path(tempfile.mkdtemp(prefix="agn-kube-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
