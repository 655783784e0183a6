"""API calls only tests make (RBAC reviews, impersonation, service-account tokens, reading
Events, the server version), kept out of the product's Kubernetes boundary :mod:`agn.kube`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from agn import GROUP
from agn.kube import EVENTS, Kube, _api_errors


def server_version(kube: Kube) -> str:
    from kubernetes.client import VersionApi

    with _api_errors:
        return VersionApi(kube.api_client).get_code().git_version


def impersonating(kube: Kube, user: str) -> Kube:
    """A new connection with the same credentials that acts as ``user`` (``Impersonate-User``);
    for a service account user the API server adds the service-account groups. Close it when done."""
    from kubernetes.client import ApiClient

    api = ApiClient(copy.copy(kube.api_client.configuration))
    api.set_default_header("Impersonate-User", user)
    return Kube(api, field_manager=kube.field_manager)


def can_i(
    kube: Kube,
    user: str,
    verb: str,
    resource: str,
    namespace: str,
    *,
    subresource: str | None = None,
    name: str | None = None,
    group: str = GROUP,
    groups: tuple[str, ...] | None = None,
) -> bool:
    """Whether ``user`` may ``verb`` ``resource``, by a SubjectAccessReview. For
    ``system:serviceaccount:<ns>:<sa>`` users the service-account groups are filled in unless
    ``groups`` is given, as the API server sees them for a real token."""
    from kubernetes.client import AuthorizationV1Api

    if groups is None:
        groups = ()
        if user.startswith("system:serviceaccount:"):
            groups = ("system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}", "system:authenticated")
    attributes: dict[str, Any] = {"verb": verb, "resource": resource, "group": group, "namespace": namespace}
    if subresource:
        attributes["subresource"] = subresource
    if name:
        attributes["name"] = name
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": list(groups), "resourceAttributes": attributes},
    }
    with _api_errors:
        review = AuthorizationV1Api(kube.api_client).create_subject_access_review(body)
    return bool(review.status and review.status.allowed)


def events(kube: Kube, namespace: str, *, regarding: str | None = None, reason: str | None = None) -> list[dict]:
    """The ``events.k8s.io/v1`` Events of ``namespace``, oldest first, optionally only those about
    the object named ``regarding`` and/or with ``reason``."""
    items, _ = kube.list(EVENTS, namespace)
    return sorted(
        (
            e
            for e in items
            if (regarding is None or (e.get("regarding") or {}).get("name") == regarding)
            and (reason is None or e.get("reason") == reason)
        ),
        key=lambda e: e.get("eventTime") or "",
    )


def service_account_kubeconfig(kube: Kube, admin_kubeconfig: Path, namespace: str, account: str, path: Path) -> Path:
    """Write a kubeconfig that authenticates as ServiceAccount ``account`` with a real token
    (TokenRequest), against the same API server as ``admin_kubeconfig``'s current context, so a
    CLI run with it is authorized exactly as that account would be in a pod."""
    from kubernetes.client import CoreV1Api

    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    with _api_errors:
        token = CoreV1Api(kube.api_client).create_namespaced_service_account_token(account, namespace, request)
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    name = f"sa-{account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster["cluster"]}],
        "users": [{"name": account, "user": {"token": token.status.token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": account, "namespace": namespace}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    return path
