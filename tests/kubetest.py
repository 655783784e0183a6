"""API calls only tests make (RBAC reviews, impersonation, service-account tokens, reading
Events, the server version), kept out of the product's Kubernetes boundary :mod:`agn.kube`."""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Iterator
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


IDENTITY_KINDS = ("ServiceAccount", "Role", "RoleBinding")


def apply_identities(kube: Kube, namespace: str, objects: list[dict], *, timeout: float = 30.0) -> None:
    """Apply the ServiceAccounts, Roles and RoleBindings among ``objects``, then return once the
    API server grants every rule of every bound Role. Its RBAC authorizer reads Roles and
    bindings from an informer cache, so for a moment after they are created a review can still
    deny; a test that checked at once would race that cache."""
    import time

    applied = [o for o in objects if o["kind"] in IDENTITY_KINDS]
    for obj in applied:
        kube.apply(obj)
    roles = {o["metadata"]["name"]: o for o in applied if o["kind"] == "Role"}
    pending = []
    for binding in (o for o in applied if o["kind"] == "RoleBinding"):
        role = roles.get(binding["roleRef"]["name"])
        for subject in binding["subjects"] if role else ():
            user = f"system:serviceaccount:{subject.get('namespace', namespace)}:{subject['name']}"
            for rule in role["rules"]:
                resource, _, subresource = rule["resources"][0].partition("/")
                names = rule.get("resourceNames") or [None]
                pending.append((user, rule["verbs"][0], resource, subresource or None, names[0], rule["apiGroups"][0]))
    deadline = time.monotonic() + timeout
    while pending:
        pending = [
            p for p in pending if not can_i(kube, p[0], p[1], p[2], namespace, subresource=p[3], name=p[4], group=p[5])
        ]
        if pending and time.monotonic() > deadline:
            raise AssertionError(f"RBAC not in effect after {timeout:.0f} s: {pending}")
        if pending:
            time.sleep(0.05)


def service_account_token(kube: Kube, namespace: str, name: str, *, seconds: int = 3600) -> str:
    """A bound token of ServiceAccount ``name`` (TokenRequest), as the kubelet would mount it into a pod."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    with _api_errors:
        return kube.core.create_namespaced_service_account_token(name, namespace, body).status.token


def cluster_entry(config: dict, context: str) -> dict:
    """The ``cluster`` of ``context`` in a kubeconfig (server, CA)."""
    ctx = next(c["context"] for c in config["contexts"] if c["name"] == context)
    return next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])


def token_kubeconfig(server: str, *, token: str, namespace: str, name: str, ca_file: str) -> dict:
    """A kubeconfig that authenticates with ``token`` and trusts the CA in ``ca_file``.

    The CA is referenced, not embedded: the client writes embedded certificate data to
    temporary files, which a read-only root filesystem without a writable /tmp refuses."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
    }


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
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = cluster_entry(admin, admin["current-context"])
    name = f"sa-{account}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": account, "user": {"token": service_account_token(kube, namespace, account)}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": account, "namespace": namespace}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    return path


ADMISSION = "admissionregistration.k8s.io/v1"


@contextlib.contextmanager
def denying_updates(
    kube: Kube,
    namespace: str,
    resource: str,
    *,
    expression: str = "false",
    message: str,
    object_selector: dict | None = None,
) -> Iterator[str]:
    """A real ValidatingAdmissionPolicy and its binding: the API server denies every UPDATE of the
    ``agn.dev`` ``resource`` in ``namespace`` (and matching ``object_selector``, if given) for
    which ``expression`` is true, saying ``message``. Yields the policy's name; both objects are
    deleted on the way out. Policies take effect a moment after they are created."""
    name = f"agn-test-deny-{uuid.uuid4().hex[:8]}"
    rule = {"apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": [resource]}
    match: dict[str, Any] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    if object_selector:
        match["objectSelector"] = object_selector
    kube.apply(
        {
            "apiVersion": ADMISSION,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule]},
                "validations": [{"expression": expression, "message": message}],
            },
        }
    )
    kube.apply(
        {
            "apiVersion": ADMISSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": match},
        }
    )
    try:
        yield name
    finally:
        kube.delete_object(ADMISSION, "ValidatingAdmissionPolicyBinding", name)
        kube.delete_object(ADMISSION, "ValidatingAdmissionPolicy", name)


def wait_crds_served(kube: Kube, namespace: str) -> None:
    """Return once every AGN resource can be listed: for a moment after the CRDs are installed
    the API server answers "storage is (re)initializing" (retried, bounded)."""
    import tenacity

    from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, SHARDS, KubeError

    for attempt in tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(KubeError),
        wait=tenacity.wait_fixed(0.2),
        stop=tenacity.stop_after_delay(60),
        reraise=True,
    ):
        with attempt:
            for res in (PROVIDERS, NETWORKS, CONSUMERS, OVERLAYS, SHARDS):
                kube.list(res, namespace)


def create(kube: Kube, res: Any, namespace: str, name: str, spec: dict, *, labels: dict | None = None) -> None:
    """Create one AGN object with ``spec`` (and ``labels``)."""
    meta: dict[str, Any] = {"name": name, **({"labels": labels} if labels else {})}
    kube.create(res, namespace, {"apiVersion": f"{GROUP}/v1alpha1", "kind": res.kind, "metadata": meta, "spec": spec})


def drain_identity_objects(namespace: str, *, network: str = "net") -> list[dict]:
    """The shipped ``agn-provider-drain`` ServiceAccount, Role and RoleBinding as the example env
    renders them into ``namespace``, with its one network (and so its drain lock's Lease) named
    ``network``: the example's consumers are moved onto it, as an env file would have them."""
    import dataclasses

    from xtask.envdef import load_env
    from xtask.envmodel import NetworkDef
    from xtask.manifests import render

    example = load_env("example")
    consumers = tuple(dataclasses.replace(c, network=network) for c in example.consumers)
    envdef = dataclasses.replace(example, networks=(NetworkDef(network, {}),), consumers=consumers)
    return [o for o in render(envdef, namespace=namespace) if o["metadata"]["name"] == "agn-provider-drain"]
