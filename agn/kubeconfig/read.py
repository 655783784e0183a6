"""Kubeconfig files read the way kubectl reads them (client-go's clientcmd loading rules);
writing them is :mod:`.write`'s.

* **Which files**: ``--kubeconfig`` alone when given (it must exist); else every file of
  ``$KUBECONFIG`` (``os.pathsep``-separated; empty and repeated entries dropped; missing files
  skipped); else ``~/.kube/config``.
* **Merge**: the first file that defines a named cluster, user or context wins, whole — an
  entry of the same name in a later file is ignored, even its other fields; the first file
  that sets a non-empty ``current-context`` wins.
* **Relative file references** (``certificate-authority``, ``client-certificate``,
  ``client-key``, ``tokenFile``, an ``exec`` command containing a slash) are resolved against
  the folder of the file that holds them.
* **Where new entries go** (:func:`write_target`): ``--kubeconfig``; else the only
  ``$KUBECONFIG`` file, or the first of the list that exists, or the last one; else
  ``~/.kube/config`` (kubectl's ``GetDefaultFilename``).

Errors are :class:`agn.kubeerrors.ConfigError` and name the file and the field. Everything is pure
except :func:`load`, which reads the files, and :func:`connection_problem`, which reads the
certificate and key files a context names (to say which field is wrong before any request).
The ``kubernetes`` package is never imported here: the client gets the merged dict
(``load_kube_config_from_dict``).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import os
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agn.inputfile import YAML_INPUT_LIMIT, read_regular
from agn.kubeerrors import ConfigError
from agn.yamltext import YamlProblem, parse_yaml, show

Config = dict[str, Any]  # a kubeconfig document, as parsed from YAML

# Named lists and the key of each entry's body.
SECTIONS = {"clusters": "cluster", "users": "user", "contexts": "context"}
# Fields of an entry's body that must be strings when present (kubectl would fail to decode others).
_STRINGS = {
    "cluster": ("server", "certificate-authority", "certificate-authority-data", "tls-server-name", "proxy-url"),
    "user": (
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "token",
        "tokenFile",
        "username",
        "password",
    ),
    "context": ("cluster", "user", "namespace"),
}
# Fields holding a path that is relative to the file they are in.
_FILE_REFS = {"clusters": ("certificate-authority",), "users": ("client-certificate", "client-key", "tokenFile")}


class NoKubeconfig(ConfigError):
    """None of the kubeconfig files exists (in a pod, the caller may fall back to the service account)."""


@dataclasses.dataclass(frozen=True)
class Files:
    """The kubeconfig files in precedence order and where that list came from."""

    paths: tuple[str, ...]
    origin: str  # "--kubeconfig" | "$KUBECONFIG" | "default"

    @property
    def explicit(self) -> bool:
        return self.origin == "--kubeconfig"


def kubeconfig_files(
    explicit: str | None = None, environ: Mapping[str, str] | None = None, home: str | None = None
) -> Files:
    """The files kubectl would read: ``--kubeconfig``, else ``$KUBECONFIG``'s list, else ``~/.kube/config``."""
    if explicit:
        return Files((explicit,), "--kubeconfig")
    environ = os.environ if environ is None else environ
    listed: list[str] = []
    for path in (environ.get("KUBECONFIG") or "").split(os.pathsep):
        if path and path not in listed:
            listed.append(path)
    if listed:
        return Files(tuple(listed), "$KUBECONFIG")
    return Files((os.path.join(home or os.path.expanduser("~"), ".kube", "config"),), "default")


def write_target(files: Files, *, exists: Callable[[str], bool] = os.path.exists) -> str:
    """The file new entries are written to, as kubectl chooses it."""
    if files.explicit or len(files.paths) == 1:
        return files.paths[0]
    return next((p for p in files.paths if exists(p)), files.paths[-1])


def kubeconfig_path(explicit: str | None = None) -> str:
    """The kubeconfig file new entries are written to, chosen as kubectl does: ``explicit``, else
    the only file of ``$KUBECONFIG`` or the first of its list that exists (the last one when none
    does), else ~/.kube/config. Reading uses every file (:func:`load`)."""
    return write_target(kubeconfig_files(explicit))


def parse(data: bytes | str, source: str) -> Config:
    """One file's content as a kubeconfig dict; an empty file is an empty config (as for kubectl).

    Raises :class:`ConfigError` naming ``source`` for non-UTF-8 or non-YAML content and for
    a wrong structure (kubectl refuses those too): the first problem, with the field and value.
    """
    try:
        doc = parse_yaml(data)
    except YamlProblem as exc:
        raise ConfigError(f"kubeconfig {source}: {exc}") from None
    if doc is None:
        return {}
    problems = shape_problems(doc)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ConfigError(f"kubeconfig {source}: {problems[0]}{more}")
    return doc


def shape_problems(doc: Any) -> list[str]:
    """What is structurally wrong with a parsed kubeconfig, each naming the field and the value."""
    if not isinstance(doc, Mapping):
        return [f"not a kubeconfig: expected a mapping at the top, got {show(doc)}"]
    out = []
    current = doc.get("current-context")
    if current is not None and not isinstance(current, str):
        out.append(f"current-context must be a string, got {show(current)}")
    for section, body_key in SECTIONS.items():
        entries = doc.get(section)
        if entries is None:
            continue
        if not isinstance(entries, list):
            out.append(f"{section} must be a list, got {show(entries)}")
            continue
        seen: set[str] = set()
        for i, entry in enumerate(entries):
            where = f"{section}[{i}]"
            if not isinstance(entry, Mapping):
                out.append(f"{where} must be a mapping, got {show(entry)}")
                continue
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                out.append(f"{where}.name must be a non-empty string, got {show(name)}")
            elif name in seen:
                out.append(f"{where}.name: duplicate name {name!r} in {section}")
            else:
                seen.add(name)
            body = entry.get(body_key)
            if body is None:
                continue
            if not isinstance(body, Mapping):
                out.append(f"{where}.{body_key} must be a mapping, got {show(body)}")
                continue
            for key in _STRINGS[body_key]:
                value = body.get(key)
                if value is not None and not isinstance(value, str):
                    out.append(f"{where}.{body_key}.{key} must be a string, got {show(value)}")
    return out


def merge(docs: Sequence[tuple[str, Mapping[str, Any]]]) -> Config:
    """kubectl's merge of parsed files, in precedence order: ``(path, config)`` pairs."""
    out: Config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "users": [],
        "contexts": [],
        "current-context": "",
    }
    seen: dict[str, set[str]] = {section: set() for section in SECTIONS}
    for source, doc in docs:
        folder = os.path.dirname(os.path.abspath(source))
        for section in SECTIONS:
            for entry in doc.get(section) or ():
                if entry["name"] in seen[section]:
                    continue
                seen[section].add(entry["name"])
                out[section].append(_resolved(section, entry, folder))
        if not out["current-context"] and doc.get("current-context"):
            out["current-context"] = doc["current-context"]
    return out


def _resolved(section: str, entry: Mapping[str, Any], folder: str) -> dict:
    """``entry`` with its relative file references made absolute against ``folder``."""
    out = copy.deepcopy(dict(entry))
    body = out.get(SECTIONS[section])
    if not isinstance(body, dict):
        return out
    for key in _FILE_REFS.get(section, ()):
        value = body.get(key)
        if value and not os.path.isabs(value):
            body[key] = os.path.join(folder, value)
    plugin = body.get("exec")
    if section == "users" and isinstance(plugin, dict):
        command = plugin.get("command")
        # Only a command with a slash is a path; a bare name is looked up on PATH.
        if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
            plugin["command"] = os.path.join(folder, command)
    return out


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The merged configuration and the files it came from."""

    files: Files
    read: tuple[str, ...]  # the files that existed and were read, in order
    config: Config

    def describe(self) -> str:
        """Where the configuration came from, for messages: the files read."""
        if self.files.origin == "$KUBECONFIG" and len(self.files.paths) > 1:
            return f"kubeconfig files {', '.join(self.read)} ($KUBECONFIG)"
        return f"kubeconfig {self.read[0] if self.read else self.files.paths[0]}"


def load(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> Loaded:
    """Read and merge the kubeconfig files kubectl would use. Raises :class:`ConfigError` naming the file."""
    files = kubeconfig_files(explicit, environ)
    docs: list[tuple[str, Config]] = []
    missing: list[str] = []
    for path in files.paths:
        try:
            data = read_regular(path, limit=YAML_INPUT_LIMIT)
        except FileNotFoundError:
            if files.explicit:
                raise NoKubeconfig(f"kubeconfig {path}: no such file") from None
            missing.append(path)
            continue
        except OSError as exc:  # InputFileError: a FIFO, a device, a directory, too large, unreadable
            raise ConfigError(f"kubeconfig {path}: {exc}") from None
        docs.append((path, parse(data, path)))
    if not docs:
        if files.origin == "$KUBECONFIG" and len(missing) > 1:
            raise NoKubeconfig(f"no kubeconfig: no file of $KUBECONFIG exists ({', '.join(missing)})")
        if files.origin == "$KUBECONFIG":
            raise NoKubeconfig(f"no kubeconfig: {missing[0]} (from $KUBECONFIG) does not exist")
        raise NoKubeconfig(f"no kubeconfig: {missing[0]} does not exist (set $KUBECONFIG or pass --kubeconfig)")
    return Loaded(files, tuple(p for p, _ in docs), merge(docs))


def select_context(config: Mapping[str, Any], context: str | None, *, where: str) -> tuple[str, Mapping[str, Any]]:
    """The context to use (``context``, else ``current-context``) and its body, checked as kubectl does:
    it exists, names a cluster that exists and has a server, and any user it names exists."""
    name = context or config.get("current-context") or ""
    if not name:
        raise ConfigError(f"no context: {where} sets no current-context; pass --context")
    contexts = {c["name"]: c for c in config.get("contexts") or ()}
    if name not in contexts:
        known = ", ".join(sorted(contexts)) or "none"
        raise ConfigError(f"context {name!r} not found in {where} (contexts: {known})")
    body = contexts[name].get("context") or {}
    cluster_name = body.get("cluster")
    clusters = {c["name"]: c.get("cluster") or {} for c in config.get("clusters") or ()}
    if not cluster_name or cluster_name not in clusters:
        raise ConfigError(f"context {name!r} names cluster {cluster_name or ''!r}, which is not in {where}")
    if not clusters[cluster_name].get("server"):
        raise ConfigError(f"cluster {cluster_name!r} of context {name!r} has no server in {where}")
    user = body.get("user")
    if user and user not in {u["name"] for u in config.get("users") or ()}:
        raise ConfigError(f"context {name!r} names user {user!r}, which is not in {where}")
    return name, body


def namespace_of(context_body: Mapping[str, Any]) -> str:
    return context_body.get("namespace") or "default"


def _entry_body(config: Mapping[str, Any], section: str, name: str) -> Mapping[str, Any]:
    for entry in config.get(section) or ():
        if entry.get("name") == name:
            return entry.get(SECTIONS[section]) or {}
    return {}


def exec_command(config: Mapping[str, Any], context: str) -> str | None:
    """The ``exec`` credential plugin command of the context's user, if it has one."""
    ctx = _entry_body(config, "contexts", context)
    plugin = _entry_body(config, "users", str(ctx.get("user") or "")).get("exec")
    return str(plugin.get("command") or "") if isinstance(plugin, Mapping) else None


def server_problem(server: str) -> str | None:
    """Why ``server`` is not an API server URL (``https://host:port``), or None."""
    try:
        parts = urllib.parse.urlsplit(server)
    except ValueError as exc:  # "Invalid IPv6 URL": a '[' without its ']'
        return f"server {server!r} is not a URL ({exc})"
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"server {server!r} is not a URL with a scheme and a host (kubectl's form: https://HOST:PORT)"
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        return f"server {server!r} has a bad port"
    return None


def connection_problem(config: Mapping[str, Any], context: str, *, where: str) -> str | None:
    """What in the context's cluster and user entries cannot work, naming the entry and the field:
    a server that is not a URL, TLS material that is not a PEM certificate or key (or a file that
    cannot be read), a client certificate and key that do not belong together. None when fine."""
    ctx = _entry_body(config, "contexts", context)
    cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
    cluster = _entry_body(config, "clusters", cluster_name)
    source = where
    where = f"cluster {cluster_name!r} of context {context!r} in {source}"
    problem = server_problem(str(cluster.get("server") or ""))
    if problem:
        return f"{where}: {problem}"
    user = _entry_body(config, "users", user_name)
    if _openssl_accepts(cluster, user):
        return None
    try:
        _pem(cluster, "certificate-authority", "certificates")
    except _BadTls as exc:
        return f"{where}: {exc}"
    where = f"user {user_name!r} of context {context!r} in {source}"
    try:
        cert = _pem(user, "client-certificate", "certificates")
        key = _pem(user, "client-key", "key")
    except _BadTls as exc:
        return f"{where}: {exc}"
    if cert and key and cert[0].public_key().public_bytes(*_spki()) != key.public_key().public_bytes(*_spki()):
        return f"{where}: client-key does not belong to client-certificate (their public keys differ)"
    return None


def usable_context(loaded: Loaded, context: str | None) -> tuple[str, Mapping[str, Any]]:
    """The context to connect with and its body (:func:`select_context`), once the problems the
    client would only report on the first request, as a bare "Bad Request" or "SSLError", or not
    at all, are ruled out (:func:`connection_problem`): each raises :class:`ConfigError`
    naming its field and context."""
    name, body = select_context(loaded.config, context, where=loaded.describe())
    problem = connection_problem(loaded.config, name, where=loaded.describe())
    if problem:
        raise ConfigError(problem)
    return name, body


class _BadTls(ValueError):
    pass


def _spki() -> tuple[Any, Any]:
    from cryptography.hazmat.primitives import serialization

    return serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo


def _raw(body: Mapping[str, Any], field: str) -> tuple[str, bytes] | None:
    """The bytes of ``field`` (a file) or ``field-data`` (base64) and how to name them, or None."""
    data_field = f"{field}-data"
    if body.get(data_field):
        try:
            return data_field, base64.b64decode(str(body[data_field]), validate=True)
        except ValueError:
            raise _BadTls(f"{data_field} is not base64") from None
    if body.get(field):
        shown = f"{field} {body[field]}"
        try:
            return shown, read_regular(str(body[field]), limit=YAML_INPUT_LIMIT)
        except OSError as exc:
            reason = exc.strerror if isinstance(exc, FileNotFoundError) else str(exc)
            raise _BadTls(f"{shown}: {reason}") from None
    return None


def _no_password() -> bytes:
    raise _BadTls("an encrypted key")  # never a prompt: the careful check names it


def _openssl_accepts(cluster: Mapping[str, Any], user: Mapping[str, Any]) -> bool:
    """Whether the standard library's OpenSSL, as the client will use it, loads the cluster's CA
    and the user's certificate with its key (which must belong together) as they are. Then
    nothing is wrong to name and :mod:`cryptography` (tens of ms to import, before the first
    request) is not needed; anything else goes to the careful check, which names the field."""
    try:
        ca, cert, key = (
            _raw(cluster, "certificate-authority"),
            *(_raw(user, f"client-{f}") for f in ("certificate", "key")),
        )
    except _BadTls:
        return False
    if (cert is None) != (key is None) or (cert is not None and not hasattr(os, "memfd_create")):
        return False
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    fds: list[int] = []
    try:
        if ca is not None:
            context.load_verify_locations(cadata=ca[1].decode("ascii"))
        if cert is not None and key is not None:
            paths = []
            for name, (_, data) in (("agn-check-cert", cert), ("agn-check-key", key)):
                fds.append(os.memfd_create(name, os.MFD_CLOEXEC))
                os.write(fds[-1], data)
                paths.append(f"/proc/self/fd/{fds[-1]}")
            context.load_cert_chain(paths[0], paths[1], password=_no_password)
    except (ssl.SSLError, ValueError, OSError, _BadTls):
        return False
    finally:
        for fd in fds:
            os.close(fd)
    return True


def _pem(body: Mapping[str, Any], field: str, what: str) -> Any:
    """The PEM certificates or key of ``field`` (a file) or ``field-data`` (base64), or None."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    got = _raw(body, field)
    if got is None:
        return None
    shown, raw = got
    try:
        if what == "key":
            return serialization.load_pem_private_key(raw, password=None)
        return x509.load_pem_x509_certificates(raw)
    except (ValueError, TypeError):
        noun = "a PEM private key" if what == "key" else "PEM certificates"
        raise _BadTls(f"{shown} does not hold {noun}") from None
