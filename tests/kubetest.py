"""API calls only tests make (RBAC reviews, impersonation, the server version), kept out of
the product's Kubernetes boundary :mod:`agn.kube`."""

from __future__ import annotations

import copy
from typing import Any

from agn import GROUP
from agn.kube import Kube, _api_errors


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
