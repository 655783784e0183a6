"""Namespaces, CRDs and objects of any kind: what a bring-up applies and a teardown removes,
beside the AGN resources :class:`agn.kube.Kube` reads and writes for the running system.

:class:`ClusterObjects` is a part of :class:`agn.kube.Kube` (its base): it reaches the API only
through what ``Kube`` gives it (the typed API classes, the discovery of any kind, the error
converter), so, like every sibling of :mod:`agn.kube`, it never imports ``kubernetes``. An
expected 404 or 409 is caught as :class:`NotFound` or :class:`Conflict`, outside the converter.
"""

from __future__ import annotations

import builtins
import contextlib
from typing import Any

from agn.kubeerrors import Conflict, NotFound
from agn.objects import Obj

CRD_GROUP = "apiextensions.k8s.io"


class ClusterObjects:
    """What :class:`agn.kube.Kube` provides to these methods (it defines each)."""

    field_manager: str
    core: Any  # kubernetes.client.CoreV1Api
    custom: Any  # kubernetes.client.CustomObjectsApi

    def _errors(self, *, read: float | None = None) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _resource_for(self, api_version: str, kind: str) -> Any:
        raise NotImplementedError

    def ensure_namespace(self, name: str) -> None:
        with contextlib.suppress(Conflict), self._errors():
            self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def namespace_exists(self, name: str) -> bool:
        """Whether the namespace exists (a GET; :class:`Forbidden` when the caller may not read it)."""
        try:
            with self._errors():
                self.core.read_namespace(name)
        except NotFound:
            return False
        return True

    def delete_namespace(self, name: str) -> None:
        with contextlib.suppress(NotFound), self._errors():
            self.core.delete_namespace(name)

    def crd_established(self, name: str) -> bool:
        try:
            with self._errors():
                crd = self.custom.get_cluster_custom_object(CRD_GROUP, "v1", "customresourcedefinitions", name)
        except NotFound:
            return False
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def list_objects(
        self, api_version: str, kind: str, *, namespace: str | None = None, label_selector: str | None = None
    ) -> builtins.list[Obj]:
        """Objects of any kind (core ones too), in ``namespace`` or cluster-scoped; a kind the
        server does not serve is :class:`NotFound`."""
        resource = self._resource_for(api_version, kind)
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        if resource.namespaced:
            kwargs["namespace"] = namespace
        with self._errors():
            return resource.get(**kwargs).to_dict().get("items", [])

    def delete_object(self, api_version: str, kind: str, name: str, *, namespace: str | None = None) -> bool:
        """Delete one object of any kind, its dependents in the background; False when it was already gone."""
        resource = self._resource_for(api_version, kind)
        kwargs: dict[str, Any] = {"namespace": namespace} if resource.namespaced else {}
        try:
            with self._errors():
                resource.delete(name=name, body={"propagationPolicy": "Background"}, **kwargs)
        except NotFound:
            return False
        return True

    def apply(self, body: Obj, *, namespace: str | None = None, dry_run: bool = False) -> Obj:
        """Server-side apply of any object (CRDs, RBAC, Deployments, AGN objects) as ``field_manager``.

        Fields this manager does not mention are left to whoever owns them — applying an
        environment never resets a provider's ``spec.trafficPolicy.drain``.
        """
        resource = self._resource_for(body["apiVersion"], body["kind"])
        kwargs: dict[str, Any] = {"field_manager": self.field_manager, "force_conflicts": True}
        if dry_run:
            kwargs["dry_run"] = "All"
        if resource.namespaced:
            kwargs["namespace"] = namespace or body.get("metadata", {}).get("namespace") or "default"
        with self._errors():
            return resource.server_side_apply(body=body, **kwargs).to_dict()
