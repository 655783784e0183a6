"""The Kubernetes boundary: the only module that imports the ``kubernetes`` client.

Everything else talks to the API through :class:`Kube` and sees the project's own error types
(:class:`KubeError` and subclasses, from :mod:`agn.kubeerrors`), which keep the client's
exception as their cause. Objects cross this boundary as plain dicts. This module holds no
policy: no retries beyond what a caller asks for, no decisions about what to write.

Callers import every name from here (error types and :mod:`agn.resources`' names are re-exported).
Its plain-Python helpers (:mod:`agn.kubeerrors`, :mod:`agn.kuberequest`, :mod:`agn.resources`,
:mod:`agn.kubeconnect`, :mod:`agn.kubetls`) must not import ``kubernetes``; nothing else may.
Importing this module does not import it either (half a second of CPU ``--help`` and ``render``
must not pay): the first call that needs it does.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import os
import threading
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Literal

from agn.kubeconnect import (
    SERVICE_ACCOUNT_NAMESPACE,
    ExecFailures,
    default_timeout,
    name_requests,
    quiet_insecure_warnings,
    service_account_namespace,
)
from agn.kubeerrors import (
    ConfigError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Unreachable,
    from_api_exception,
    unreachable_message,
    watch_error,
)
from agn.kubeobjects import ClusterObjects
from agn.kuberequest import ApiRequest
from agn.objects import Obj
from agn.resources import AGN_RESOURCES, CONSUMERS, EVENTS, LEASES, NETWORKS, OVERLAYS, PROVIDERS, SHARDS, Resource

__all__ = [
    "AGN_RESOURCES",
    "CONNECT_TIMEOUT",
    "CONSUMERS",
    "EVENTS",
    "LEASES",
    "NETWORKS",
    "OVERLAYS",
    "PROVIDERS",
    "READ_TIMEOUT",
    "SERVICE_ACCOUNT_NAMESPACE",
    "SHARDS",
    "WATCH_READ_MARGIN",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "Kube",
    "KubeError",
    "NotFound",
    "Resource",
    "Unreachable",
]

if TYPE_CHECKING:
    from kubernetes import client

    from agn.kubetls import TlsMaterial


# Every request has a connect and a read timeout (seconds): a server that never answers is an
# error naming it, not a hang. The read timeout bounds each wait for bytes, not the transfer. A
# watch reads with its server-side timeout plus WATCH_READ_MARGIN (then the connection is dead).
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 20.0
WATCH_READ_MARGIN = 15.0


@dataclasses.dataclass(frozen=True)
class _Converting:
    """Context manager that turns client exceptions into :class:`KubeError`, saying which API
    server (and context) did what: refused the connection, did not answer within the timeout."""

    server: str = ""
    context: str | None = None
    connect: float = CONNECT_TIMEOUT
    read: float = READ_TIMEOUT

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is None or isinstance(exc, KubeError):
            return False
        import urllib3
        from kubernetes.client.rest import ApiException

        if isinstance(exc, ApiException):
            raise from_api_exception(exc, server=self.server, context=self.context) from exc
        if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
            raise Unreachable(
                unreachable_message(exc, server=self.server, context=self.context, connect=self.connect, read=self.read)
            ) from exc
        return False


_api_errors = _Converting()  # for callers without a Kube (tests' raw API calls)


def _load_tls_in_memory(config_dict: dict, context: str, cfg: client.Configuration) -> TlsMaterial:
    """Fill ``cfg`` from ``context`` of ``config_dict`` as the client's loader does, but no CA, client
    certificate or key is ever written to a temporary file (:mod:`agn.kubetls`): they stay in memory."""
    from kubernetes import config

    from agn import kubetls
    from agn.kubeconfig import exec_command

    loadable, tls = kubetls.without_tls_data(config_dict, context)
    if exec_command(config_dict, context) is None:
        # Without an exec plugin the loader writes nothing (the *-data fields are taken out), so
        # no temporary folder is made: a container with a read-only root has none to offer.
        config.load_kube_config_from_dict(loadable, context=context, client_configuration=cfg, persist_config=False)
    else:
        with kubetls.private_temp_folder() as folder:
            config.load_kube_config_from_dict(
                loadable, context=context, client_configuration=cfg, persist_config=False, temp_file_path=str(folder)
            )
            tls.adopt_files(cfg, folder)
    tls.apply(cfg)
    return tls


class Kube(ClusterObjects):
    """A connection to one cluster. Thread-safe; share one per process.

    AGN's resources, watches, Events and Secrets here; namespaces, CRDs and objects of any kind
    (what a bring-up applies and a teardown removes) in :class:`~agn.kubeobjects.ClusterObjects`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        field_manager: str,
        context: str | None = None,
        namespace: str = "default",
        user: str | None = None,
        request_timeout: tuple[float, float] | None = None,
    ) -> None:
        self._api = api_client
        self.field_manager = field_manager
        self.context = context  # the kube context's name (None: in-cluster)
        self.user = user  # the context's user entry (None: in-cluster); recorded with drains as "who"
        self.namespace = namespace  # the context's namespace (in a pod: the service account's), as kubectl uses it
        # (connect, read) seconds for every request that does not name its own (see READ_TIMEOUT).
        self.request_timeout = request_timeout or (CONNECT_TIMEOUT, READ_TIMEOUT)
        default_timeout(api_client, self.request_timeout)
        from kubernetes.client.exceptions import ApiException  # loaded with the client that was passed

        name_requests(api_client, ApiException.from_response)  # every error names its request (agn.kuberequest)
        self._dynamic: Any = None
        self._dynamic_lock = threading.Lock()

    def _errors(self, *, read: float | None = None) -> _Converting:
        """The converter for one call: names this server and context and the read timeout in force."""
        connect, default_read = self.request_timeout
        return _Converting(self.host, self.context, connect, read or default_read)

    # API classes are built on first use (CoreV1Api alone loads ~250 generated modules).
    @functools.cached_property
    def custom(self) -> client.CustomObjectsApi:
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self._api)

    @functools.cached_property
    def core(self) -> client.CoreV1Api:
        from kubernetes.client import CoreV1Api

        return CoreV1Api(self._api)

    @classmethod
    def from_kubeconfig(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        field_manager: str,
        pool_size: int = 16,
        request_timeout: tuple[float, float] | None = None,
    ) -> Kube:
        """Connect with a kube context, reading the kubeconfig files as kubectl does (:mod:`agn.kubeconfig.read`):
        ``kubeconfig`` alone, else every file of ``$KUBECONFIG`` merged, else ~/.kube/config."""
        from agn import kubeconfig as kc

        try:
            loaded = kc.load(kubeconfig)
        except kc.NoKubeconfig:
            if not kubeconfig and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
                # Inside a pod with no kubeconfig: use the pod's service account, as kubectl does.
                return cls.in_cluster(field_manager=field_manager, pool_size=pool_size, request_timeout=request_timeout)
            raise
        name, body = kc.usable_context(loaded, context)

        from kubernetes import client
        from kubernetes.config.config_exception import ConfigException

        cfg = client.Configuration()
        try:
            with ExecFailures() as plugin:
                tls = _load_tls_in_memory(loaded.config, name, cfg)
        except (ConfigException, OSError, TypeError, ValueError, KeyError, AttributeError) as exc:
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise ConfigError(f"cannot use context {name!r} from {loaded.describe()}: {detail}") from exc
        plugin.check(kc.exec_command(loaded.config, name), context=name, where=loaded.describe())
        if not cfg.verify_ssl:
            quiet_insecure_warnings()
        cfg.connection_pool_maxsize = pool_size
        cfg.retries = False
        api = client.ApiClient(cfg)
        tls.keep_open_for(api)
        return cls(
            api,
            field_manager=field_manager,
            context=name,
            namespace=kc.namespace_of(body),
            user=str(body.get("user") or "") or None,
            request_timeout=request_timeout,
        )

    @classmethod
    def in_cluster(
        cls, *, field_manager: str, pool_size: int = 16, request_timeout: tuple[float, float] | None = None
    ) -> Kube:
        """Connect with the pod's service account token (``KUBERNETES_SERVICE_HOST`` and the mounted token)."""
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
        except ConfigException as exc:
            raise ConfigError(f"cannot use the in-cluster service account: {exc}") from exc
        cfg.connection_pool_maxsize = pool_size
        cfg.retries = False
        return cls(
            client.ApiClient(cfg),
            field_manager=field_manager,
            namespace=service_account_namespace(),
            request_timeout=request_timeout,
        )

    @property
    def api_client(self) -> client.ApiClient:
        """The underlying client, for an API class this boundary does not wrap (tests' access reviews)."""
        return self._api

    @property
    def host(self) -> str:
        return self._api.configuration.host

    def get(self, res: Resource, namespace: str, name: str, *, timeout: float | None = None) -> Obj:
        """``timeout`` (seconds) bounds the request, for callers that must not hang on a dead connection."""
        kwargs = {"_request_timeout": timeout} if timeout else {}
        with self._errors(read=timeout):
            return self.custom.get_namespaced_custom_object(
                res.group, res.version, namespace, res.plural, name, **kwargs
            )

    def list(
        self, res: Resource, namespace: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> tuple[list[Obj], str]:
        """Items and the list's resourceVersion (to start a watch from). ``field_selector=
        "metadata.name=X"`` lets a caller whose RBAC names only ``X`` (``resourceNames``) list it."""
        kwargs = {"label_selector": label_selector} if label_selector else {}
        if field_selector:
            kwargs["field_selector"] = field_selector
        with self._errors():
            out = self.custom.list_namespaced_custom_object(res.group, res.version, namespace, res.plural, **kwargs)
        return out.get("items", []), out.get("metadata", {}).get("resourceVersion", "")

    def create(
        self,
        res: Resource,
        namespace: str,
        body: Obj,
        *,
        dry_run: bool = False,
        field_validation: str | None = None,
        timeout: float | None = None,
    ) -> Obj:
        """Create; ``field_validation="Strict"`` makes unknown fields an error instead of pruned."""
        kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        if field_validation:
            kwargs["field_validation"] = field_validation
        if timeout:
            kwargs["_request_timeout"] = timeout
        with self._errors(read=timeout):
            return self.custom.create_namespaced_custom_object(
                res.group, res.version, namespace, res.plural, body, field_manager=self.field_manager, **kwargs
            )

    def replace(self, res: Resource, namespace: str, name: str, body: Obj, *, timeout: float | None = None) -> Obj:
        """Full update; ``body.metadata.resourceVersion`` (when set) is a precondition."""
        kwargs = {"_request_timeout": timeout} if timeout else {}
        with self._errors(read=timeout):
            return self.custom.replace_namespaced_custom_object(
                res.group, res.version, namespace, res.plural, name, body, field_manager=self.field_manager, **kwargs
            )

    def merge_patch(self, res: Resource, namespace: str, name: str, patch: Obj, *, dry_run: bool = False) -> Obj:
        """JSON merge patch. Put ``metadata.resourceVersion`` in ``patch`` to make it conditional (409 on change)."""
        kwargs = {"dry_run": "All"} if dry_run else {}
        with self._errors():
            return self.custom.patch_namespaced_custom_object(
                res.group, res.version, namespace, res.plural, name, patch, field_manager=self.field_manager, **kwargs
            )

    def merge_patch_status(self, res: Resource, namespace: str, name: str, patch: Obj) -> Obj:
        with self._errors():
            return self.custom.patch_namespaced_custom_object_status(
                res.group, res.version, namespace, res.plural, name, patch, field_manager=self.field_manager
            )

    def delete(self, res: Resource, namespace: str, name: str, *, uid: str | None = None, **opts: Any) -> None:
        """Delete; only that ``uid``/``resource_version=`` (else 409 :class:`Conflict`); ``timeout=`` s."""
        resource_version, timeout = opts.get("resource_version"), opts.get("timeout")
        kwargs: dict[str, Any] = {"_request_timeout": timeout} if timeout else {}
        if uid or resource_version:
            from kubernetes.client import V1DeleteOptions, V1Preconditions

            kwargs["body"] = V1DeleteOptions(preconditions=V1Preconditions(uid=uid, resource_version=resource_version))
        with self._errors(read=timeout):
            self.custom.delete_namespaced_custom_object(res.group, res.version, namespace, res.plural, name, **kwargs)

    def watch(
        self,
        res: Resource,
        namespace: str,
        *,
        resource_version: str,
        timeout_seconds: int = 60,
        field_selector: str | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """Yields ``(type, object)`` from a watch starting after ``resource_version``.

        Raises :class:`Gone` when the version is too old (the caller re-lists). Ends quietly
        when the server closes the watch after ``timeout_seconds``; the caller re-watches
        from the last resourceVersion it saw (BOOKMARK events carry one too).
        """
        read = timeout_seconds + WATCH_READ_MARGIN
        kwargs: dict[str, Any] = dict(resource_version=resource_version, timeout_seconds=timeout_seconds)
        kwargs.update(allow_watch_bookmarks=True, _request_timeout=(self.request_timeout[0], read))
        if field_selector:
            kwargs["field_selector"] = field_selector
        from kubernetes import watch

        w = watch.Watch()
        path = f"/apis/{res.group}/{res.version}/namespaces/{namespace}/{res.plural}"
        request = ApiRequest("WATCH", path, res.plural, res.group, namespace=namespace)
        with self._errors(read=read):
            for event in w.stream(
                self.custom.list_namespaced_custom_object, res.group, res.version, namespace, res.plural, **kwargs
            ):
                kind = event.get("type", "")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise watch_error(obj, request)
                yield kind, obj

    def who_am_i(self) -> tuple[str, float]:
        """The caller's username (a ``SelfSubjectReview``) and the server's clock (its ``Date`` header).

        Sent as the plain object it is, through the custom-objects API every other request here
        uses: the typed ``AuthenticationV1Api`` cost every drain ~30 ms of CPU before its first
        request (its module and models, ~13 ms, and the pydantic validator of the typed call,
        built on its first call, ~17-22 ms), for one field of the answer."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        with self._errors():
            review, _, headers = self.custom.create_cluster_custom_object_with_http_info(
                "authentication.k8s.io", "v1", "selfsubjectreviews", body
            )
        username = (((review or {}).get("status") or {}).get("userInfo") or {}).get("username")
        if not username:
            raise KubeError(f"API server {self.host} answered a SelfSubjectReview without a username")
        return str(username), parsedate_to_datetime(headers["Date"]).timestamp()

    def create_event(self, namespace: str, body: Obj, *, timeout: float | None = None) -> Obj:
        return self.create(EVENTS, namespace, body, timeout=timeout)  # agn.events.event_body

    def secret_data(self, namespace: str, name: str) -> dict[str, bytes]:
        """A Secret's data, decoded: only :mod:`agn.credentials` reads one (a token), and never shows it."""
        with self._errors():
            data = self.core.read_namespaced_secret(name, namespace).data or {}
        return {key: base64.b64decode(value) for key, value in data.items()}

    def _resource_for(self, api_version: str, kind: str):
        from kubernetes import dynamic  # discovery is slow; only paid by callers that apply manifests
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        with self._dynamic_lock:
            if self._dynamic is None:
                with self._errors():
                    self._dynamic = dynamic.DynamicClient(self._api)
            # Discovery asks the API server on first use: an unreachable one is a KubeError
            # (Unreachable) naming the server, like any other call, never a raw urllib3 error.
            with self._errors():
                try:
                    return self._dynamic.resources.get(api_version=api_version, kind=kind)
                except ResourceNotFoundError:
                    # A CRD installed after discovery ran: refresh once.
                    self._dynamic.resources.invalidate_cache()
                    try:
                        return self._dynamic.resources.get(api_version=api_version, kind=kind)
                    except ResourceNotFoundError as exc:
                        raise NotFound(
                            f"the API server has no resource {kind} in {api_version}",
                            status=404,
                            hint="is its CustomResourceDefinition installed and Established?",
                        ) from exc

    def close(self) -> None:
        self._api.close()
