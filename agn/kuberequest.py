"""What an API request was, in the words an error message uses: its verb, resource, object and
namespace (``PATCH inferenceproviders/provider-one in agn-example``), read from the request's
method, URL and body the way the API server reads them.

:mod:`agn.kubeconnect` attaches one :class:`ApiRequest` to every error the client raises for a
request (:func:`attach`); :mod:`agn.kubeerrors` finds it again (:func:`request_of`) when it turns
the error into the project's own. Plain Python: no ``kubernetes`` import, no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

# The attribute an error of the client carries its request under (see attach).
_ATTRIBUTE = "agn_request"
# Subresources of a Namespace itself (/api/v1/namespaces/NAME/finalize), not a namespaced plural.
_NAMESPACE_SUBRESOURCES = frozenset({"finalize", "status"})


@dataclasses.dataclass(frozen=True)
class ApiRequest:
    """One request. ``verb`` is the Kubernetes verb in capitals (GET, LIST, WATCH, CREATE,
    UPDATE, PATCH, APPLY for a server-side apply, DELETE, DELETECOLLECTION), or the HTTP method
    of a path that names no resource (discovery, ``/version``), which ``path`` then shows."""

    verb: str
    path: str
    resource: str = ""  # the plural ("inferenceproviders"); "" for a path that names no resource
    group: str = ""  # "" for the core group
    name: str = ""  # "" for a collection (LIST, WATCH, CREATE without a name in its body)
    namespace: str = ""
    subresource: str = ""
    dry_run: bool = False

    def __str__(self) -> str:
        if not self.resource:
            return f"{self.verb} {self.path}"
        text = f"{self.verb} {'/'.join(p for p in (self.resource, self.name, self.subresource) if p)}"
        if self.namespace:
            text += f" in {self.namespace}"
        return text + (" (dry run)" if self.dry_run else "")

    @property
    def qualified_resource(self) -> str:
        """``plural.group`` as kubectl and RBAC name it (``inferenceproviders.agn.dev``; ``pods``)."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def can_i(self) -> str:
        """The ``kubectl auth can-i`` command that asks whether the caller may make this request."""
        verb = {"APPLY": "patch", "DELETECOLLECTION": "deletecollection"}.get(self.verb, self.verb.lower())
        target = self.qualified_resource + (f"/{self.name}" if self.name else "")
        command = f"kubectl auth can-i {verb} {target}"
        if self.subresource:
            command += f" --subresource={self.subresource}"
        return command + (f" -n {self.namespace}" if self.namespace else "")


def parse(method: str, url: str, *, body: Any = None, content_type: str = "") -> ApiRequest:
    """The request a client sends as ``method`` to ``url`` (a full URL or a path, query included)
    with ``body`` (a dict, when it has one): the name a CREATE gives in ``metadata.name``."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    segments = [unquote(s) for s in parts.path.split("/") if s]
    method = method.upper()
    if segments[:1] == ["api"] and len(segments) >= 2:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        group, rest = segments[1], segments[3:]
    else:
        return ApiRequest(method, parts.path or "/")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in _NAMESPACE_SUBRESOURCES):
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return ApiRequest(method, parts.path)  # a group version's discovery document
    name = rest[1] if len(rest) > 1 else ""
    if method == "POST" and not name and isinstance(body, dict):
        name = str((body.get("metadata") or {}).get("name") or "")
    return ApiRequest(
        verb=_verb(method, named=len(rest) > 1, query=query, content_type=content_type),
        path=parts.path,
        resource=rest[0],
        group=group,
        name=name,
        namespace=namespace,
        subresource="/".join(rest[2:]),
        dry_run="All" in query.get("dryRun", []),
    )


def _verb(method: str, *, named: bool, query: dict[str, list[str]], content_type: str) -> str:
    if method == "GET":
        if query.get("watch", [""])[0] in ("true", "1"):
            return "WATCH"
        return "GET" if named else "LIST"
    if method == "PATCH" and content_type.startswith("application/apply-patch"):
        return "APPLY"
    if method == "DELETE" and not named:
        return "DELETECOLLECTION"
    return {"POST": "CREATE", "PUT": "UPDATE"}.get(method, method)


def attach(exc: BaseException, request: ApiRequest) -> None:
    """Record on ``exc`` (an error the client raised for ``request``) which request it was."""
    setattr(exc, _ATTRIBUTE, request)


def request_of(exc: BaseException | None) -> ApiRequest | None:
    """The request ``exc`` was raised for: recorded on it or on the error it was raised from (the
    dynamic client raises its own error type while handling the one the request raised)."""
    for _ in range(4):
        if exc is None:
            return None
        found = getattr(exc, _ATTRIBUTE, None)
        if isinstance(found, ApiRequest):
            return found
        exc = exc.__cause__ or exc.__context__
    return None
