"""Second (and third) real identities for tests on the local control plane: client certificates
for users such as ``alice`` and ``bob``, issued from the env's CA, each with its own kubeconfig,
and the RBAC that gives them the drain role (``manifests/rbac/provider-drain.yaml``) or the
release verb (``manifests/rbac/drain-releaser.yaml``) in one namespace."""

from __future__ import annotations

import copy
import shutil
import time
from pathlib import Path

import yaml

from agn import kubeconfig
from agn.kube import Kube
from kubetest import can_i
from xtask.envdef import load_env
from xtask.manifests import RBAC_DIR, render
from xtask.runtime.certs import CertPaths, issue_client_certificate

DRAIN_ROLE = "agn-provider-drain"
RELEASER_ROLE = "agn-drain-releaser"


def user_kubeconfig(control_plane, user: str, folder: Path, *, namespace: str, path: Path | None = None) -> Path:
    """A kubeconfig (context named ``user``; added to ``path`` when given) that authenticates as
    ``user`` with a client certificate from the control plane's CA."""
    folder.mkdir(parents=True, exist_ok=True)
    slug = "".join(c if c.isalnum() else "-" for c in user)
    cert, key = folder / f"{slug}.crt", folder / f"{slug}.key"
    paths = CertPaths.under(control_plane.state_dir / "certs")
    issue_client_certificate(paths, cert, key, user=user)
    path = path or folder / f"{slug}.kubeconfig"
    kubeconfig.add_context(
        path,
        kubeconfig.context_entries(
            name=user,
            server=control_plane.server,
            ca_cert=paths.ca_cert,
            client_cert=cert,
            client_key=key,
            namespace=namespace,
        ),
    )
    return path


def users_kubeconfig(control_plane, users: list[str], folder: Path, *, namespace: str) -> Path:
    """A copy of the control plane's kubeconfig (its admin context) with a context per user
    (named as the user) added."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "kubeconfig"
    shutil.copyfile(control_plane.kubeconfig, path)
    for user in users:
        user_kubeconfig(control_plane, user, folder, namespace=namespace, path=path)
    return path


def drain_role(namespace: str) -> dict:
    """The drain Role exactly as the kind and cluster runtimes render it."""
    return next(
        o
        for o in render(load_env("example"), namespace=namespace)
        if o["metadata"]["name"] == DRAIN_ROLE and o["kind"] == "Role"
    )


def releaser_cluster_role() -> dict:
    return yaml.safe_load((RBAC_DIR / "drain-releaser.yaml").read_text())


def bind(kube: Kube, namespace: str, *, kind: str, role: str, users: list[str]) -> None:
    """A RoleBinding in ``namespace`` of Role/ClusterRole ``role`` to ``users``."""
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{role}-tests", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users],
        }
    )


def grant(kube: Kube, namespace: str, *, drainers: list[str], releasers: list[str], timeout: float = 30.0) -> None:
    """Give ``drainers`` and ``releasers`` the drain Role, ``releasers`` the release verb too;
    return once the API server's authorizer grants them (its cache lags a moment)."""
    kube.apply(drain_role(namespace))
    kube.apply(copy.deepcopy(releaser_cluster_role()))
    bind(kube, namespace, kind="Role", role=DRAIN_ROLE, users=[*drainers, *releasers])
    if releasers:
        bind(kube, namespace, kind="ClusterRole", role=RELEASER_ROLE, users=releasers)
    wanted = [(u, "patch") for u in [*drainers, *releasers]] + [(u, "release-holds") for u in releasers]
    deadline = time.monotonic() + timeout
    while wanted:
        wanted = [(u, v) for u, v in wanted if not can_i(kube, u, v, "inferenceproviders", namespace, groups=())]
        if wanted and time.monotonic() > deadline:
            raise AssertionError(f"RBAC not in effect after {timeout:.0f} s: {wanted}")
        if wanted:
            time.sleep(0.05)
